"""A durable inbox journal: an inbound message is on disk before the platform is acked.

Append-only JSONL in the workspace (``inbox.jsonl``):
``{"id": "...", "msg": {...}}`` when a message arrives (fsynced), ``{"done": "..."}`` once
the agent has appended it to its session. On start, entries without a ``done`` are replayed;
the journal is then compacted to those entries plus the recent dedupe ids, so a platform
redelivery after a restart is still recognised.

A handled message's text stays in the file until the next compaction. When the owner makes
the assistant forget something (``forgotten_version`` changes: the tombstone file's stat),
the journal compacts at the next handled message, and once more when the messages pending
then are handled, so a forgotten text does not linger here for thousands of messages.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import asdict
from pathlib import Path
from collections.abc import Callable
from typing import TextIO

from lucidgate.channels.messages import InboundMessage, ScheduledTask
from lucidgate.config.fileio import atomic_write

logger = logging.getLogger(__name__)

SEEN_KEEP = 5000
# Rewrite the journal after this many lines, so it never grows with uptime (a long-running
# gateway appends two lines per message; compaction keeps only pending entries and ids).
COMPACT_EVERY = 4096


def _msg_from_json(data: dict) -> InboundMessage:
    data = dict(data)
    data["media"] = tuple(data.get("media") or ())
    if isinstance(data.get("task"), dict):
        data["task"] = ScheduledTask(**data["task"])
    return InboundMessage(**data)


# Written only when set, so a journal of a daemon without several agents reads as before.
_OPTIONAL = {"agent": "", "account": None}


def _msg_to_json(msg: InboundMessage) -> dict:
    return {k: v for k, v in asdict(msg).items() if k not in _OPTIONAL or v != _OPTIONAL[k]}


class InboxJournal:
    """Thread-safe journal; call its methods through ``asyncio.to_thread`` from async code."""

    def __init__(self, path: Path, *, forgotten_version: Callable[[], object] | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._pending: dict[str, InboundMessage] = {}
        self._fh: TextIO | None = None
        self._lines_since_compact = 0
        self._forgotten_version = forgotten_version
        self._forgotten_at: object = None
        self._compact_when_drained = False

    def open(self) -> list[tuple[str, InboundMessage]]:
        """Load, compact and open for appending. Returns the entries to replay, in order."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        pending: dict[str, InboundMessage] = {}
        if self.path.exists():
            with self.path.open("r", encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    self._load_line(line, lineno, pending)
        self._pending = pending
        self._forgotten_at = self._forgotten_version() if self._forgotten_version else None
        self._compact()
        self._fh = self.path.open("a", encoding="utf-8")
        return list(pending.items())

    def _load_line(self, line: str, lineno: int, pending: dict[str, InboundMessage]) -> None:
        if not line.strip():
            return
        try:
            entry = json.loads(line)
            if "done" in entry:
                pending.pop(entry["done"], None)
            elif "unseen" in entry:
                self._seen.pop(entry["unseen"], None)
            elif "seen" in entry:
                self._remember(entry["seen"])
            else:
                msg = _msg_from_json(entry["msg"])
                pending[entry["id"]] = msg
                if msg.dedupe_id:
                    self._remember(msg.dedupe_id)
        except (ValueError, KeyError, TypeError):
            logger.warning("inbox.jsonl line %d is corrupt; skipped", lineno)

    def _remember(self, dedupe_id: str) -> None:
        self._seen[dedupe_id] = None
        self._seen.move_to_end(dedupe_id)
        while len(self._seen) > SEEN_KEEP:
            self._seen.popitem(last=False)

    def _compact(self) -> None:
        # 0600 from the temp file's first byte: every inbound text is in here.
        with atomic_write(self.path) as fh:
            for dedupe_id in self._seen:
                fh.write((json.dumps({"seen": dedupe_id}) + "\n").encode("utf-8"))
            for entry_id, msg in self._pending.items():
                fh.write((json.dumps({"id": entry_id, "msg": _msg_to_json(msg)}) + "\n").encode("utf-8"))

    def seen(self, dedupe_id: str | None) -> bool:
        return dedupe_id is not None and dedupe_id in self._seen

    def append(self, msg: InboundMessage) -> str | None:
        """Durably record ``msg``. Returns its entry id, or None if it is a duplicate."""
        with self._lock:
            if self.seen(msg.dedupe_id):
                return None
            entry_id = uuid.uuid4().hex[:16]
            self._write({"id": entry_id, "msg": _msg_to_json(msg)}, sync=True)
            if msg.dedupe_id:
                self._remember(msg.dedupe_id)
            self._pending[entry_id] = msg
            return entry_id

    def done(self, entry_id: str) -> None:
        """The message is in its session now; no fsync (a replay is deduped by the session)."""
        with self._lock:
            if self._pending.pop(entry_id, None) is not None:
                self._write({"done": entry_id}, sync=False)
            if self._lines_since_compact >= COMPACT_EVERY or self._forget_asks_compaction():
                self._compact_online()

    def _forget_asks_compaction(self) -> bool:
        """Something was forgotten since the last look: compact now; if messages were
        pending then (their text stays until handled), compact again once they are."""
        if self._forgotten_version is not None:
            version = self._forgotten_version()
            if version != self._forgotten_at:
                self._forgotten_at = version
                self._compact_when_drained = bool(self._pending)
                return True
        if self._compact_when_drained and not self._pending:
            self._compact_when_drained = False
            return True
        return False

    def _compact_online(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._compact()
        self._fh = self.path.open("a", encoding="utf-8")
        self._lines_since_compact = 0

    def retract(self, entry_id: str, dedupe_id: str | None) -> None:
        """The message was refused after all (queue full): not pending, not a duplicate."""
        with self._lock:
            self._pending.pop(entry_id, None)
            self._write({"done": entry_id}, sync=False)
            if dedupe_id is not None and dedupe_id in self._seen:
                del self._seen[dedupe_id]
                self._write({"unseen": dedupe_id}, sync=True)

    def _write(self, entry: dict, *, sync: bool) -> None:
        if self._fh is None:
            raise RuntimeError("InboxJournal.open() was not called")
        self._fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._fh.flush()
        self._lines_since_compact += 1
        if sync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
