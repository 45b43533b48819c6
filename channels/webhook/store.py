"""Durable state of the webhook channel: the accepted requests.

One SQLite file in the workspace (``state/webhook.sqlite``), one table: ``requests`` holds a
row per accepted message that needs remembering — it carries an ``idempotency_key`` (the
same key within 24 h returns the first result and never runs a second turn) or a
``callback_url`` (its answer may have to be POSTed later, also after a restart). The answers
themselves wait in the gateway's one outbox (``channels.outbox``) until the callback is
accepted. A workspace from an older release may still hold an ``outbox`` table here;
``take_legacy_deliveries`` hands its pending rows over once, at start.

Every method is one transaction on one connection behind a lock, so "record the reply"
and "the client stopped waiting, call back instead" can never interleave: whichever runs
second sees the other's result. Methods block; call them through ``asyncio.to_thread``.
``synchronous=FULL``: a request we answered 202 for must survive a power cut.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lucidgate.channels._sqlite import SqliteStore

# The webhook API's promise to clients ("the same key within 24 h"): a protocol fact, not a setting.
IDEMPOTENCY_TTL_S = 24 * 3600
# Housekeeping bound on rows whose callback never completed (the answer itself is in the outbox).
PENDING_TTL_S = 7 * 24 * 3600

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


def callback_body(*, delivery_id: str, message_id: str | None, session: str, chat_id: str,
                  reply: str, is_error: bool, files: list[dict[str, Any]] | None = None) -> str:
    """The JSON document POSTed to a callback URL (signed as sent, byte for byte); ``files``
    (name, path, size, content_base64) only when the message carries some."""
    data: dict[str, Any] = {
        "type": "error" if is_error else "reply",
        "delivery_id": delivery_id,
        "message_id": message_id,
        "session": session,
        "chat_id": chat_id,
        "reply": reply,
        "error": is_error,
    }
    if files:
        data["files"] = files
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class WebhookStore(SqliteStore):
    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        # ``with db:`` opens and commits each method's transaction.
        super().__init__(path, _SCHEMA, rows=True, isolation_level="DEFERRED")
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    def open(self) -> None:
        with self._lock:
            self._conn()

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
            db = self._conn()
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
            row = self._conn().execute(
                "SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
        return None if row is None else _record(row)

    def forget(self, message_id: str) -> None:
        """The message never reached the bus: release its idempotency key."""
        with self._lock:
            db = self._conn()
            with db:
                db.execute("DELETE FROM requests WHERE message_id = ?", (message_id,))

    def want_callback(self, message_id: str) -> RequestRecord | None:
        """The client stopped waiting: call back instead — unless the answer is already here."""
        with self._lock:
            db = self._conn()
            with db:
                row = db.execute("SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
                if row is None or row["status"] == "done":
                    return None if row is None else _record(row)
                if row["callback_url"]:
                    db.execute("UPDATE requests SET want_callback = 1 WHERE message_id = ?", (message_id,))
                    row = db.execute("SELECT * FROM requests WHERE message_id = ?",
                                     (message_id,)).fetchone()
        return _record(row)

    def finish(self, message_id: str, reply: str, is_error: bool) -> RequestRecord | None:
        """Record the answer (the first one wins; a retry of the same answer changes nothing).

        Returns the request as stored, so the caller knows whether a callback is wanted."""
        now = self._clock()
        with self._lock:
            db = self._conn()
            with db:
                db.execute("UPDATE requests SET status = 'done', reply = ?, is_error = ?, finished_at = ?"
                           " WHERE message_id = ? AND status != 'done'", (reply, int(is_error), now, message_id))
                row = db.execute("SELECT * FROM requests WHERE message_id = ?", (message_id,)).fetchone()
        return None if row is None else _record(row)

    def want_callback_to(self, message_id: str, url: str) -> None:
        """The answer to ``message_id`` is to be POSTed to ``url`` (moving an old pending callback)."""
        with self._lock:
            db = self._conn()
            with db:
                db.execute("UPDATE requests SET callback_url = ?, want_callback = 1 WHERE message_id = ?",
                           (url, message_id))

    def latest_callback(self, chat_id: str) -> str | None:
        """Where an unsolicited message (a reminder, the ``message`` tool) goes: the chat's latest callback."""
        with self._lock:
            row = self._conn().execute(
                "SELECT callback_url FROM requests WHERE chat_id = ? AND callback_url IS NOT NULL"
                " ORDER BY created_at DESC LIMIT 1", (chat_id,)).fetchone()
        return None if row is None else str(row["callback_url"])

    def purge(self) -> int:
        """Drop answered requests past the idempotency window and unanswered ones after a week."""
        now = self._clock()
        with self._lock:
            db = self._conn()
            with db:
                return db.execute(
                    "DELETE FROM requests WHERE (status = 'done' AND created_at < ?) OR created_at < ?",
                    (now - IDEMPOTENCY_TTL_S, now - PENDING_TTL_S)).rowcount

    def take_legacy_deliveries(self) -> list[LegacyDelivery]:
        """Pending callbacks of the old per-channel outbox table, removed from it as they are
        returned (the caller records them in the gateway's outbox first thing)."""
        with self._lock:
            db = self._conn()
            if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='outbox'").fetchone() is None:
                return []
            with db:
                rows = db.execute("SELECT url, body FROM outbox WHERE status = 'pending'"
                                  " ORDER BY created_at").fetchall()
                db.execute("DROP TABLE outbox")
        found = []
        for row in rows:
            try:
                data = json.loads(row["body"])
                found.append(LegacyDelivery(str(data["chat_id"]), data.get("message_id"), str(data["reply"]),
                                            bool(data.get("error")), str(row["url"])))
            except (ValueError, KeyError, TypeError):
                continue  # a row this version cannot read was never deliverable either
        return found


@dataclass(frozen=True, slots=True)
class LegacyDelivery:
    chat_id: str
    message_id: str | None
    reply: str
    is_error: bool
    url: str


def _record(row: sqlite3.Row) -> RequestRecord:
    return RequestRecord(
        message_id=row["message_id"], idem_key=row["idem_key"], fingerprint=row["fingerprint"],
        session=row["session"], chat_id=row["chat_id"], sender_id=row["sender_id"],
        callback_url=row["callback_url"], want_callback=bool(row["want_callback"]),
        status=row["status"], reply=row["reply"], is_error=bool(row["is_error"]),
        created_at=row["created_at"],
    )
