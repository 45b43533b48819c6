"""The SQLite open/close block shared by the outbox and the webhook's stores (``channels._sqlite``)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from lucidgate.channels._sqlite import SqliteStore

SCHEMA = "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);"


class Notes(SqliteStore):
    """A store as the real ones are written; it notes which thread closed it."""

    def __init__(self, path: Path, schema: str = SCHEMA) -> None:
        super().__init__(path, schema)
        self.closed_in: list[int] = []

    def add(self, text: str) -> None:
        with self._lock:
            self._conn().execute("INSERT INTO notes (text) VALUES (?)", (text,))

    def all(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn().execute("SELECT text FROM notes ORDER BY id")]

    def close(self) -> None:
        self.closed_in.append(threading.get_ident())
        super().close()


async def test_aclose_closes_in_a_worker_thread_and_the_next_call_reopens_with_the_data(tmp_path: Path) -> None:
    path = tmp_path / "state" / "notes.sqlite"  # the folder does not exist yet
    store = Notes(path)
    store.add("kept")
    await store.aclose()
    assert store.closed_in and store.closed_in[0] != threading.get_ident()  # not on the event loop
    store.add("after close")  # a late write reopens the file instead of failing
    assert store.all() == ["kept", "after close"]
    await store.aclose()
    again = Notes(path)
    assert again.all() == ["kept", "after close"]
    again.close()


def test_the_file_is_durable_and_readers_do_not_wait_for_the_writer(tmp_path: Path) -> None:
    store = Notes(tmp_path / "notes.sqlite")
    db = store._conn()
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_a_schema_that_fails_half_way_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    broken = Notes(path, SCHEMA + "\nCREATE TABLE other (x INTEGER;")
    with pytest.raises(sqlite3.OperationalError):
        broken.add("lost?")
    with sqlite3.connect(path) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == []  # the first table was rolled back with the failed second one
    fixed = Notes(path)  # a later, correct open works on the same file
    fixed.add("fine")
    assert fixed.all() == ["fine"]
    fixed.close()
