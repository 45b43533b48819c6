"""Each web chat's durable events, numbered, kept in memory and appended to disk.

Layout: ``<workspace>/state/web/<chat id>.jsonl``, one ``ChatEvent`` per line. Ids
start at 1 per chat and only grow (the next id is one past the last line on disk), so
``after(n)`` is exactly what a tab that saw ``n`` has missed. Streaming previews and the
typing indicator are not events: they are worth nothing once the reply has arrived.

A chat's events are loaded from disk on first use; ids are assigned synchronously (no
``await`` between numbering and publishing), so two writers never share an id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal


logger = logging.getLogger(__name__)

EventType = Literal["user", "reply", "error"]
KEEP = 500  # events per chat held in memory (older ones stay on disk)
_SAFE_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ChatEvent:
    id: int
    type: EventType
    text: str
    at: float
    message_id: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class ChatLog:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._events: dict[str, list[ChatEvent]] = {}
        self._next: dict[str, int] = {}
        self._write_lock = asyncio.Lock()

    def path_for(self, chat_id: str) -> Path:
        """The console's own chat ids are file-safe; anything else is named by its digest."""
        if _SAFE_ID.match(chat_id):
            return self.folder / f"{chat_id}.jsonl"
        return self.folder / f"~{hashlib.sha256(chat_id.encode('utf-8')).hexdigest()[:24]}.jsonl"

    async def load(self, chat_id: str) -> None:
        """Read the chat's file once (a worker thread); later calls return at once."""
        if chat_id in self._next:
            return
        events = await asyncio.to_thread(self._read, chat_id)
        if chat_id not in self._next:  # another task may have loaded it meanwhile
            self._events[chat_id] = events[-KEEP:]
            self._next[chat_id] = (events[-1].id + 1) if events else 1

    def _read(self, chat_id: str) -> list[ChatEvent]:
        path = self.path_for(chat_id)
        events: list[ChatEvent] = []
        try:
            with path.open("r", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        raw = json.loads(line)
                        events.append(ChatEvent(id=int(raw["id"]), type=raw["type"], text=str(raw["text"]),
                                                at=float(raw.get("at", 0)), message_id=raw.get("message_id"),
                                                tools=list(raw.get("tools") or [])))
                    except (ValueError, KeyError, TypeError):
                        logger.warning("%s: skipping a damaged line", path)
        except FileNotFoundError:
            pass
        return events

    def add(self, chat_id: str, type_: EventType, text: str, *, message_id: str | None = None,
            tools: list[dict[str, Any]] | None = None) -> ChatEvent:
        """Number and keep one event now (call ``load`` first); ``persist`` writes it."""
        event_id = self._next.get(chat_id, 1)
        self._next[chat_id] = event_id + 1
        event = ChatEvent(event_id, type_, text, time.time(), message_id, list(tools or []))
        kept = self._events.setdefault(chat_id, [])
        kept.append(event)
        del kept[:-KEEP]
        return event

    def find(self, chat_id: str, type_: EventType, message_id: str) -> ChatEvent | None:
        """The kept event answering ``message_id`` (a retried delivery must not add a twin)."""
        return next((e for e in self._events.get(chat_id, [])
                     if e.message_id == message_id and e.type == type_), None)

    async def persist(self, chat_id: str, event: ChatEvent) -> None:
        line = json.dumps(event.as_json(), ensure_ascii=False) + "\n"
        async with self._write_lock:
            await asyncio.to_thread(self._append, self.path_for(chat_id), line)

    @staticmethod
    def _append(path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

    def after(self, chat_id: str, last_seen: int) -> list[ChatEvent]:
        return [e for e in self._events.get(chat_id, []) if e.id > last_seen]

    def last_id(self, chat_id: str) -> int:
        return self._next.get(chat_id, 1) - 1

    def chats(self) -> list[str]:
        """Chat ids with a file on disk or events in memory, the most recently used first
        (a new browser tab opens that one). Blocking: call from a thread."""
        last: dict[str, float] = {c: events[-1].at for c, events in self._events.items() if events}
        if self.folder.exists():
            for path in self.folder.glob("*.jsonl"):
                try:
                    last[path.stem] = max(last.get(path.stem, 0.0), path.stat().st_mtime)
                except FileNotFoundError:
                    continue
        for chat_id in self._events:
            last.setdefault(chat_id, 0.0)
        return sorted(last, key=lambda c: (-last[c], c))
