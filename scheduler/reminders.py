"""Reminders and scheduled tasks in SQLite (``workspace/state/reminders.sqlite``): the truth.

A row is a *reminder* (``purpose = 'reminder'``: a fixed text sent back to the chat) or a
*task* (``purpose = 'task'``: an instruction an agent turn carries out in the chat, as the
user who created it, whose id and role at the time are kept with it). Both can be paused
(``status = 'paused'``: kept, not scheduled) and resumed.

APScheduler keeps its jobs in memory; at start they are rebuilt from this table. Every
method is blocking (stdlib ``sqlite3``) and opens its own short connection, so callers run
them through ``asyncio.to_thread`` and ``lucid jobs`` can read the file while the gateway
writes it (WAL mode).

"Never fired twice" lives here: a firing *claims* the reminder with one conditional
``UPDATE`` before anything is sent. A one-shot goes ``active`` -> ``done`` (or ``missed``)
exactly once; a recurring one records ``last_fired`` and refuses a second claim for the
same occurrence, even from a second process sharing the workspace.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

Status = Literal["active", "paused", "done", "missed", "removed"]
Purpose = Literal["reminder", "task"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reminders (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    channel     TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    kind        TEXT NOT NULL CHECK (kind IN ('at', 'every', 'cron')),
    spec        TEXT NOT NULL,
    text        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'active',
    last_fired  TEXT,
    fire_count  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS reminders_by_session ON reminders (session_key, status);
"""
# Columns added after the first release; a file from before gets them on open.
_ADDED_COLUMNS = {
    "purpose": "TEXT NOT NULL DEFAULT 'reminder'",
    "creator_id": "TEXT",
    "creator_role": "TEXT",
    "chat_type": "TEXT",
    "creator_spender": "TEXT",  # who pays for a guest's task when not its creator (a credential)
}


@dataclass(frozen=True, slots=True)
class Reminder:
    id: int
    session_key: str
    channel: str
    chat_id: str
    thread_id: str | None
    kind: str
    spec: str
    text: str
    created_at: datetime
    status: str = "active"
    last_fired: datetime | None = None
    fire_count: int = 0
    purpose: str = "reminder"
    creator_id: str | None = None
    creator_role: str | None = None
    chat_type: str | None = None
    creator_spender: str | None = None

    @property
    def job_id(self) -> str:
        return f"reminder:{self.id}"

    @property
    def is_task(self) -> bool:
        return self.purpose == "task"

    @property
    def label(self) -> str:
        """How the chat and ``lucid jobs`` name it: ``reminder #3`` / ``task #4``."""
        return f"{'task' if self.is_task else 'reminder'} #{self.id}"

    @property
    def recurring(self) -> bool:
        return self.kind != "at"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def _row(row: sqlite3.Row) -> Reminder:
    return Reminder(
        id=row["id"], session_key=row["session_key"], channel=row["channel"],
        chat_id=row["chat_id"], thread_id=row["thread_id"], kind=row["kind"], spec=row["spec"],
        text=row["text"], created_at=datetime.fromisoformat(row["created_at"]),
        status=row["status"],
        last_fired=datetime.fromisoformat(row["last_fired"]) if row["last_fired"] else None,
        fire_count=row["fire_count"], purpose=row["purpose"], creator_id=row["creator_id"],
        creator_role=row["creator_role"], chat_type=row["chat_type"],
        creator_spender=row["creator_spender"],
    )


class ReminderStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._ready = False
        self._init_lock = threading.Lock()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._init_lock:
            if not self._ready:
                self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            if not self._ready:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                have = {r["name"] for r in conn.execute("PRAGMA table_info(reminders)")}
                for column, decl in _ADDED_COLUMNS.items():
                    if column not in have:
                        conn.execute(f"ALTER TABLE reminders ADD COLUMN {column} {decl}")
                self._ready = True
            yield conn
        finally:
            conn.close()

    # -- writes ----------------------------------------------------------------------------
    def add(self, *, session_key: str, channel: str, chat_id: str, thread_id: str | None,
            kind: str, spec: str, text: str, created_at: datetime, purpose: Purpose = "reminder",
            creator_id: str | None = None, creator_role: str | None = None,
            chat_type: str | None = None, creator_spender: str | None = None) -> Reminder:
        with self._connect() as conn:
            cur = conn.execute(
                "INSERT INTO reminders (session_key, channel, chat_id, thread_id, kind, spec, text,"
                " created_at, purpose, creator_id, creator_role, chat_type, creator_spender)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_key, channel, chat_id, thread_id, kind, spec, text, _iso(created_at),
                 purpose, creator_id, creator_role, chat_type, creator_spender))
            row = conn.execute("SELECT * FROM reminders WHERE id = ?", (cur.lastrowid,)).fetchone()
        return _row(row)

    def remove(self, session_key: str, reminder_id: int) -> bool:
        """Remove one of *this chat's* active or paused entries; False if there is no such one."""
        return self._move(session_key, reminder_id, ("active", "paused"), "removed")

    def pause(self, session_key: str, reminder_id: int) -> bool:
        return self._move(session_key, reminder_id, ("active",), "paused")

    def resume(self, session_key: str, reminder_id: int) -> bool:
        return self._move(session_key, reminder_id, ("paused",), "active")

    def _move(self, session_key: str, reminder_id: int, from_: tuple[str, ...], to: Status) -> bool:
        marks = ", ".join("?" for _ in from_)
        with self._connect() as conn:
            cur = conn.execute(
                f"UPDATE reminders SET status = ? WHERE id = ? AND session_key = ? AND status IN ({marks})",
                (to, reminder_id, session_key, *from_))
        return cur.rowcount == 1

    def claim_once(self, reminder_id: int, status: Status, at: datetime) -> bool:
        """Move an active one-shot to ``status``; True only for the single caller that did."""
        with self._connect() as conn:
            cur = conn.execute(
                "UPDATE reminders SET status = ?, last_fired = ?, fire_count = fire_count + 1 "
                "WHERE id = ? AND status = 'active'", (status, _iso(at), reminder_id))
        return cur.rowcount == 1

    def claim_occurrence(self, reminder_id: int, at: datetime, min_gap_s: float) -> bool:
        """Record a recurring reminder's firing unless one was recorded within ``min_gap_s``.

        Occurrences are at least ``min_gap_s`` apart, so a claim that close to the last one
        is the same occurrence seen twice (a restart, a second process), not a new one.
        """
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT status, last_fired FROM reminders WHERE id = ?",
                                   (reminder_id,)).fetchone()
                ok = row is not None and row["status"] == "active" and (
                    row["last_fired"] is None
                    or (at - datetime.fromisoformat(row["last_fired"])).total_seconds() >= min_gap_s)
                if ok:
                    conn.execute("UPDATE reminders SET last_fired = ?, fire_count = fire_count + 1 "
                                 "WHERE id = ?", (_iso(at), reminder_id))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return ok

    # -- reads -----------------------------------------------------------------------------
    def get(self, reminder_id: int) -> Reminder | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM reminders WHERE id = ?", (reminder_id,)).fetchone()
        return _row(row) if row is not None else None

    def active(self, session_key: str | None = None) -> list[Reminder]:
        query = "SELECT * FROM reminders WHERE status = 'active'"
        args: tuple[str, ...] = ()
        if session_key is not None:
            query += " AND session_key = ?"
            args = (session_key,)
        with self._connect() as conn:
            rows = conn.execute(query + " ORDER BY id", args).fetchall()
        return [_row(r) for r in rows]

    def listed(self, session_key: str) -> list[Reminder]:
        """This chat's active and paused entries, oldest first (what the chat can manage)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM reminders WHERE status IN ('active', 'paused') AND "
                                "session_key = ? ORDER BY id", (session_key,)).fetchall()
        return [_row(r) for r in rows]

    def count_active(self, session_key: str) -> int:
        """Active and paused entries of a chat (both count against its limit)."""
        with self._connect() as conn:
            row = conn.execute("SELECT COUNT(*) FROM reminders WHERE status IN ('active', 'paused') "
                               "AND session_key = ?", (session_key,)).fetchone()
        return int(row[0])

    def count_active_by_guests(self) -> int:
        """Active and paused entries set by guests, in every chat."""
        with self._connect() as conn:
            row = conn.execute("SELECT COUNT(*) FROM reminders WHERE status IN ('active', 'paused') "
                               "AND creator_role = 'guest'").fetchone()
        return int(row[0])

    def all(self, limit: int = 200) -> list[Reminder]:
        """Newest first, any status (``lucid jobs --all``)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM reminders ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_row(r) for r in rows]
