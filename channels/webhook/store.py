"""Durable state of the webhook channel: accepted requests and the callback outbox.

One SQLite file in the workspace (``state/webhook.sqlite``). Two tables:

``requests``  one row per accepted message that needs remembering — it carries an
              ``idempotency_key`` (the same key within 24 h returns the first result and
              never runs a second turn) or a ``callback_url`` (its answer may have to be
              POSTed later, also after a restart).
``outbox``    one row per callback to deliver; a row stays until it is delivered or given
              up after N attempts, so a restart resumes pending deliveries.

Every method is one transaction on one connection behind a lock, so "record the reply"
and "the client stopped waiting, call back instead" can never interleave: whichever runs
second sees the other's result. Methods block; call them through ``asyncio.to_thread``.
``synchronous=FULL``: a request we answered 202 for must survive a power cut.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

IDEMPOTENCY_TTL_S = 24 * 3600
PENDING_TTL_S = 7 * 24 * 3600
OUTBOX_KEEP_S = 7 * 24 * 3600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    message_id    TEXT PRIMARY KEY,
    idem_key      TEXT UNIQUE,
    fingerprint   TEXT NOT NULL,
    session       TEXT NOT NULL,
    chat_id       TEXT NOT NULL,
    sender_id     TEXT NOT NULL,
    callback_url  TEXT,
    want_callback INTEGER NOT NULL DEFAULT 0,
    status        TEXT NOT NULL DEFAULT 'pending',
    reply         TEXT,
    is_error      INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    finished_at   REAL
);
CREATE INDEX IF NOT EXISTS requests_chat ON requests (chat_id, created_at);
CREATE TABLE IF NOT EXISTS outbox (
    delivery_id TEXT PRIMARY KEY,
    message_id  TEXT,
    url         TEXT NOT NULL,
    body        TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     REAL NOT NULL,
    status      TEXT NOT NULL DEFAULT 'pending',
    last_error  TEXT,
    created_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_at);
"""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    message_id: str
    idem_key: str | None
    fingerprint: str
    session: str
    chat_id: str
    sender_id: str
    callback_url: str | None
    want_callback: bool
    status: str
    reply: str | None
    is_error: bool
    created_at: float

    @property
    def done(self) -> bool:
        return self.status == "done"


@dataclass(frozen=True, slots=True)
class Delivery:
    delivery_id: str
    message_id: str | None
    url: str
    body: str
    attempts: int


def callback_body(*, delivery_id: str, message_id: str | None, session: str, chat_id: str,
                  reply: str, is_error: bool) -> str:
    """The JSON document POSTed to a callback URL (signed as sent, byte for byte)."""
    return json.dumps({
        "type": "error" if is_error else "reply",
        "delivery_id": delivery_id,
        "message_id": message_id,
        "session": session,
        "chat_id": chat_id,
        "reply": reply,
        "error": is_error,
    }, ensure_ascii=False, separators=(",", ":"))


class WebhookStore:
    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def now(self) -> float:
        return self._clock()

    # -- connection ------------------------------------------------------------------------
    def open(self) -> None:
        now = self._clock()
        with self._lock:
            db = self._connection()
            # Deliveries leased or backing off when the process stopped: resume them now.
            with db:
                db.execute("UPDATE outbox SET next_at = ? WHERE status = 'pending' AND next_at > ?",
                           (now, now))

    def _connection(self) -> sqlite3.Connection:
        # Reopened on demand: a reply that lands after stop() (the bus flushes last) is
        # still recorded, and delivered at the next start.
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
            db.isolation_level = "DEFERRED"
            self._db = db
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- requests --------------------------------------------------------------------------
    def claim(self, *, message_id: str, idem_key: str | None, fingerprint: str, session: str,
              chat_id: str, sender_id: str, callback_url: str | None,
              want_callback: bool) -> tuple[RequestRecord, bool]:
        """Record a new request, or return the live one with the same idempotency key.

        Returns ``(record, created)``. A key older than 24 h is released (the old row keeps
        its message id, so its late answer still finds its callback).
        """
        now = self._clock()
        with self._lock:
            db = self._connection()
            with db:
                if idem_key is not None:
                    row = db.execute("SELECT * FROM requests WHERE idem_key = ?", (idem_key,)).fetchone()
                    if row is not None and row["created_at"] >= now - IDEMPOTENCY_TTL_S:
                        return _record(row), False
                    if row is not None:
                        db.execute("UPDATE requests SET idem_key = NULL WHERE message_id = ?",
                                   (row["message_id"],))
                db.execute(
                    "INSERT INTO requests (message_id, idem_key, fingerprint, session, chat_id, sender_id,"
                    " callback_url, want_callback, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (message_id, idem_key, fingerprint, session, chat_id, sender_id, callback_url,
                     int(want_callback), now))
                row = db.execute("SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
        return _record(row), True

    def get(self, message_id: str) -> RequestRecord | None:
        with self._lock:
            row = self._connection().execute(
                "SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
        return None if row is None else _record(row)

    def forget(self, message_id: str) -> None:
        """The message never reached the bus: release its idempotency key."""
        with self._lock:
            db = self._connection()
            with db:
                db.execute("DELETE FROM requests WHERE message_id = ?", (message_id,))

    def want_callback(self, message_id: str) -> RequestRecord | None:
        """The client stopped waiting: call back instead — unless the answer is already here."""
        with self._lock:
            db = self._connection()
            with db:
                row = db.execute("SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
                if row is None or row["status"] == "done":
                    return None if row is None else _record(row)
                if row["callback_url"]:
                    db.execute("UPDATE requests SET want_callback = 1 WHERE message_id = ?", (message_id,))
                    row = db.execute("SELECT * FROM requests WHERE message_id = ?",
                                     (message_id,)).fetchone()
        return _record(row)

    def finish(self, message_id: str, reply: str, is_error: bool) -> tuple[RequestRecord | None, str | None]:
        """Record the answer; queue its callback when one is wanted. Returns (record, delivery id)."""
        now = self._clock()
        with self._lock:
            db = self._connection()
            with db:
                row = db.execute("SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
                if row is None:
                    return None, None
                if row["status"] == "done":  # answered once already; never twice
                    return _record(row), None
                db.execute("UPDATE requests SET status = 'done', reply = ?, is_error = ?, finished_at = ?"
                           " WHERE message_id = ?", (reply, int(is_error), now, message_id))
                delivery_id = None
                if row["want_callback"] and row["callback_url"]:
                    delivery_id = self._enqueue(db, row["callback_url"], message_id, row["session"],
                                                row["chat_id"], reply, is_error, now)
                row = db.execute("SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
        return _record(row), delivery_id

    def push(self, chat_id: str, session: str, text: str, is_error: bool) -> str | None:
        """An unsolicited message (a reminder, the ``message`` tool): the chat's latest callback."""
        now = self._clock()
        with self._lock:
            db = self._connection()
            with db:
                row = db.execute(
                    "SELECT callback_url FROM requests WHERE chat_id = ? AND callback_url IS NOT NULL"
                    " ORDER BY created_at DESC LIMIT 1", (chat_id,)).fetchone()
                if row is None:
                    return None
                return self._enqueue(db, row["callback_url"], None, session, chat_id, text, is_error, now)

    @staticmethod
    def _enqueue(db: sqlite3.Connection, url: str, message_id: str | None, session: str, chat_id: str,
                 reply: str, is_error: bool, now: float) -> str:
        delivery_id = uuid.uuid4().hex
        body = callback_body(delivery_id=delivery_id, message_id=message_id, session=session,
                             chat_id=chat_id, reply=reply, is_error=is_error)
        db.execute("INSERT INTO outbox (delivery_id, message_id, url, body, next_at, created_at)"
                   " VALUES (?, ?, ?, ?, ?, ?)", (delivery_id, message_id, url, body, now, now))
        return delivery_id

    # -- outbox ----------------------------------------------------------------------------
    def lease_due(self, *, limit: int, lease_s: float) -> list[Delivery]:
        """Due deliveries, leased for ``lease_s`` so the next scan does not send them twice."""
        now = self._clock()
        with self._lock:
            db = self._connection()
            with db:
                rows = db.execute(
                    "SELECT * FROM outbox WHERE status = 'pending' AND next_at <= ? ORDER BY next_at LIMIT ?",
                    (now, limit)).fetchall()
                db.executemany("UPDATE outbox SET next_at = ? WHERE delivery_id = ?",
                               [(now + lease_s, r["delivery_id"]) for r in rows])
        return [Delivery(r["delivery_id"], r["message_id"], r["url"], r["body"], r["attempts"]) for r in rows]

    def next_due(self) -> float | None:
        with self._lock:
            row = self._connection().execute(
                "SELECT MIN(next_at) FROM outbox WHERE status = 'pending'").fetchone()
        return None if row is None else row[0]

    def delivered(self, delivery_id: str) -> None:
        self._set_outcome(delivery_id, "delivered", None, None)

    def attempt_failed(self, delivery_id: str, error: str, retry_in: float | None) -> int:
        """Count a failed attempt; retry in ``retry_in`` s, or give up when None. Returns attempts."""
        retry_at = None if retry_in is None else self._clock() + retry_in
        return self._set_outcome(delivery_id, "pending" if retry_at is not None else "failed",
                                 error, retry_at)

    def _set_outcome(self, delivery_id: str, status: str, error: str | None, retry_at: float | None) -> int:
        with self._lock:
            db = self._connection()
            with db:
                db.execute(
                    "UPDATE outbox SET status = ?, attempts = attempts + 1, last_error = ?,"
                    " next_at = COALESCE(?, next_at) WHERE delivery_id = ?",
                    (status, error, retry_at, delivery_id))
                row = db.execute("SELECT attempts FROM outbox WHERE delivery_id = ?", (delivery_id,)).fetchone()
        return 0 if row is None else int(row[0])

    def outbox_counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._connection().execute(
                "SELECT status, COUNT(*) FROM outbox GROUP BY status").fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def purge(self) -> int:
        """Drop answered requests past the idempotency window and old finished deliveries."""
        now = self._clock()
        with self._lock:
            db = self._connection()
            with db:
                n = db.execute(
                    "DELETE FROM requests WHERE (status = 'done' AND created_at < ?) OR created_at < ?",
                    (now - IDEMPOTENCY_TTL_S, now - PENDING_TTL_S)).rowcount
                n += db.execute("DELETE FROM outbox WHERE status != 'pending' AND created_at < ?",
                                (now - OUTBOX_KEEP_S,)).rowcount
        return n


def _record(row: sqlite3.Row) -> RequestRecord:
    return RequestRecord(
        message_id=row["message_id"], idem_key=row["idem_key"], fingerprint=row["fingerprint"],
        session=row["session"], chat_id=row["chat_id"], sender_id=row["sender_id"],
        callback_url=row["callback_url"], want_callback=bool(row["want_callback"]),
        status=row["status"], reply=row["reply"], is_error=bool(row["is_error"]),
        created_at=row["created_at"],
    )
