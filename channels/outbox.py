"""The durable outbox: every final outbound item is on disk before its first send attempt.

One SQLite file (``state/outbox.sqlite``, WAL, ``synchronous=FULL``) for every channel. A
reply, error reply, reminder, refusal, pairing message or command answer is *recorded* here
by the bus before a channel sees it, and *marked delivered* only after the channel's ``send``
returned (the platform accepted it). What is still pending at a restart is sent again, in
per-chat order (``pending`` is ordered by id). Streaming previews and typing indicators are
not recorded: they are best-effort.

The one window this cannot close: the process dies after the platform answered 200 and before
``delivered`` is committed. That item is sent again at the next start (a duplicate). A send
that timed out after the platform performed it is retried too (at-least-once, never
at-most-once: a reply the transcript says was given must reach the user).

Items that keep failing transiently are retried with backoff until their deadline
(``channels.<name>.deliveryDeadlineH``); permanent refusals (chat not found, bot blocked,
invalid payload) and expired items become dead letters, counted for ``/status``.

Every method is one short transaction behind a lock; callers run them with
``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lucidgate.channels._sqlite import SqliteStore
from lucidgate.channels.messages import OutboundError, OutboundMessage, OutboundText, Target, TurnUsage

DURABLE_KINDS = frozenset({"text", "error"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    channel     TEXT NOT NULL,
    chat        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',   -- pending | delivered | dead
    created_at  REAL NOT NULL,
    deadline_at REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    parts_done  INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(state, channel, id);
"""

# Delivered rows are kept this long (for `lucid status` and debugging), then purged: housekeeping,
# not a setting (no behaviour a user sees depends on it).
KEEP_DELIVERED_S = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Item:
    id: int
    msg: OutboundText | OutboundError
    deadline_at: float
    attempts: int
    parts_done: int


def chat_key(target: Target) -> str:
    return f"{target.chat_id}:{target.thread_id or ''}"


def encode(msg: OutboundText | OutboundError) -> str:
    t = msg.target
    data: dict[str, Any] = {
        "kind": msg.kind, "text": msg.text, "in_reply_to": msg.in_reply_to, "delivery_id": msg.delivery_id,
        "target": {"channel": t.channel, "chat_id": t.chat_id, "thread_id": t.thread_id,
                   "reply_to": t.reply_to},
    }
    if isinstance(msg, OutboundText):
        data["plain"] = msg.plain
        if msg.files:
            data["files"] = list(msg.files)
        if msg.buttons:
            data["buttons"] = [list(b) for b in msg.buttons]
        if msg.usage is not None:
            data["usage"] = [msg.usage.prompt_tokens, msg.usage.completion_tokens]
        if msg.agent:
            data["agent"] = msg.agent
    return json.dumps(data, ensure_ascii=False)


def decode(payload: str) -> OutboundText | OutboundError:
    data = json.loads(payload)
    target = Target(**data["target"])
    delivery_id = data.get("delivery_id")
    if data["kind"] == "error":
        return OutboundError(target, data["text"], in_reply_to=data.get("in_reply_to"), delivery_id=delivery_id)
    return OutboundText(target, data["text"], in_reply_to=data.get("in_reply_to"),
                        plain=bool(data.get("plain", False)), delivery_id=delivery_id,
                        files=tuple(str(f) for f in data.get("files") or ()),
                        buttons=tuple((str(b[0]), str(b[1])) for b in data.get("buttons") or ()),
                        usage=TurnUsage(*(int(n) for n in data["usage"][:2])) if data.get("usage") else None,
                        agent=str(data.get("agent") or ""))


class Outbox(SqliteStore):
    """The SQLite store behind the bus's delivery lanes."""

    def __init__(self, path: Path, *, deadlines_s: Mapping[str, float]) -> None:
        """``deadlines_s``: how long each channel's items are retried (its config section's
        ``deliveryDeadlineH``, from the channel descriptors). A channel the map does not name —
        a test's stand-in — gets the longest of them: nothing is dropped sooner than any
        configured channel would drop it."""
        if not deadlines_s:
            raise ValueError("the outbox needs the delivery deadline of at least one channel")
        super().__init__(path, _SCHEMA)
        self._deadlines = dict(deadlines_s)
        self._default_deadline = max(self._deadlines.values())

    def deadline_s(self, channel: str) -> float:
        return self._deadlines.get(channel, self._default_deadline)

    # -- writes ---------------------------------------------------------------------------
    def record(self, msg: OutboundText | OutboundError) -> Item:
        """Store ``msg`` as pending; the returned item's message carries its delivery id."""
        if msg.delivery_id is None:
            msg = dataclasses.replace(msg, delivery_id=uuid.uuid4().hex)
        now = time.time()
        deadline = now + self.deadline_s(msg.target.channel)
        with self._lock:
            cur = self._conn().execute(
                "INSERT INTO outbox(channel, chat, payload, created_at, deadline_at) VALUES (?,?,?,?,?)",
                (msg.target.channel, chat_key(msg.target), encode(msg), now, deadline))
            item_id = cur.lastrowid
        assert item_id is not None
        return Item(item_id, msg, deadline, 0, 0)

    def delivered(self, item_id: int) -> None:
        with self._lock:
            self._conn().execute(
                "UPDATE outbox SET state='delivered', attempts=attempts+1 WHERE id=? AND state='pending'",
                (item_id,))

    def failed_attempt(self, item_id: int, error: str, parts_done: int) -> None:
        with self._lock:
            self._conn().execute(
                "UPDATE outbox SET attempts=attempts+1, last_error=?, parts_done=MAX(parts_done, ?) "
                "WHERE id=?", (error[:500], parts_done, item_id))

    def dead(self, item_id: int, error: str) -> None:
        with self._lock:
            self._conn().execute(
                "UPDATE outbox SET state='dead', attempts=attempts+1, last_error=? WHERE id=?",
                (error[:500], item_id))

    def purge(self, now: float | None = None) -> int:
        cutoff = (now or time.time()) - KEEP_DELIVERED_S
        with self._lock:
            cur = self._conn().execute(
                "DELETE FROM outbox WHERE state='delivered' AND created_at < ?", (cutoff,))
            return cur.rowcount

    # -- reads ----------------------------------------------------------------------------
    def reply_to(self, target: Target, message_id: str, recent: int = 50) -> OutboundText | OutboundError | None:
        """The answer already recorded for ``message_id`` in that chat (any state), if any.

        A kill between recording an answer and writing its transcript line leaves a turn
        that looks unanswered; the resume uses this to write the line instead of answering
        a second time. Only the chat's newest ``recent`` items are looked at."""
        with self._lock:
            rows = self._conn().execute(
                "SELECT payload FROM outbox WHERE channel=? AND chat=? ORDER BY id DESC LIMIT ?",
                (target.channel, chat_key(target), recent)).fetchall()
        for (payload,) in rows:
            msg = decode(payload)
            if msg.in_reply_to == message_id:
                return msg
        return None

    def pending(self, channel: str) -> list[Item]:
        """Undelivered items of ``channel``, oldest first (per-chat order is id order)."""
        with self._lock:
            rows = self._conn().execute(
                "SELECT id, payload, deadline_at, attempts, parts_done FROM outbox "
                "WHERE state='pending' AND channel=? ORDER BY id", (channel,)).fetchall()
        return [Item(r[0], decode(r[1]), r[2], r[3], r[4]) for r in rows]

    def counts_by_channel(self) -> dict[str, dict[str, int]]:
        """Rows by channel and state (the console's status page)."""
        with self._lock:
            rows = self._conn().execute(
                "SELECT channel, state, COUNT(*) FROM outbox GROUP BY channel, state").fetchall()
        out: dict[str, dict[str, int]] = {}
        for channel, state, n in rows:
            out.setdefault(channel, {"pending": 0, "delivered": 0, "dead": 0})[state] = n
        return out

    def counts(self) -> dict[str, int]:
        """Rows by state: ``pending``, ``delivered``, ``dead``."""
        with self._lock:
            rows = self._conn().execute("SELECT state, COUNT(*) FROM outbox GROUP BY state").fetchall()
        out = {"pending": 0, "delivered": 0, "dead": 0}
        out.update({r[0]: r[1] for r in rows})
        return out


def is_durable(msg: OutboundMessage) -> bool:
    return msg.kind in DURABLE_KINDS


def read_counts(path: Path) -> dict[str, int] | None:
    """``lucid status``: the counts of the outbox at ``path`` without opening it for writing
    (None: no outbox yet)."""
    if not path.exists():
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT state, COUNT(*) FROM outbox GROUP BY state").fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    out = {"pending": 0, "delivered": 0, "dead": 0}
    out.update({r[0]: r[1] for r in rows})
    return out
