"""The one way a channel store opens and closes its SQLite file.

The outbox, the webhook's request store and its chat ledger each keep one connection behind
a lock, opened on first use (a write that lands after ``close`` reopens it, so nothing is
lost at shutdown) and used from worker threads, never from the event loop. They share:

* ``journal_mode=WAL`` so readers never wait for the writer, and ``synchronous=FULL`` because
  what they hold was promised to someone (a reply, a 202, a chat's role) and must survive a
  power cut;
* a schema created in one transaction: a crash half-way leaves no half-made tables, and a
  second process opening the same file at once waits for the first instead of racing it;
* ``aclose`` for the event loop: closing checkpoints the WAL, which is disk work.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Literal

Isolation = Literal["DEFERRED", "EXCLUSIVE", "IMMEDIATE"] | None
BUSY_TIMEOUT_MS = 5000


class SqliteStore:
    """A store over one SQLite file; subclasses run their statements under ``self._lock``
    on ``self._conn()``."""

    def __init__(self, path: Path, schema: str, *, rows: bool = False, isolation_level: Isolation = None) -> None:
        """``rows``: rows come back as ``sqlite3.Row``. ``isolation_level``: what the connection
        uses after the schema exists (``None``, autocommit, means the store issues ``BEGIN``
        itself; ``"DEFERRED"`` lets ``with db:`` open and commit a transaction)."""
        self.path = path
        self._schema = schema
        self._rows = rows
        self._isolation_level = isolation_level
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        """The connection, opened (and the schema made) on first use; call under ``_lock``."""
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            if self._rows:
                db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(f"BEGIN IMMEDIATE;\n{self._schema}\nCOMMIT;")
        except BaseException:
            db.close()  # an open transaction is rolled back with it
            raise
        db.isolation_level = self._isolation_level
        return db

    def close(self) -> None:
        """Close the connection (blocking); the next call opens it again."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    async def aclose(self) -> None:
        """``close`` from the event loop, on a worker thread."""
        await asyncio.to_thread(self.close)
