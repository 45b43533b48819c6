"""Where each DingTalk chat's answers go, kept across restarts in ``state/dingtalk.json``.

A robot message names its way back: a session webhook (``sessionWebhook``, valid for a while,
no token needed), and the ids the OpenAPI send needs once it has expired — the conversation
(a group) or the staff id of the person (a private chat). Replies wait in the durable outbox
through a restart, so this is written down too: a reply replayed after a restart still finds
its chat. Written atomically, off the event loop, only when a chat is new or its webhook
changed (its expiry alone moves with every message and is not worth a write).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

MAX_CHATS = 5000


@dataclass(frozen=True, slots=True)
class Route:
    """``user_id``: the staff id a private chat's OpenAPI send goes to ("" in a group)."""

    group: bool
    user_id: str = ""
    webhook: str | None = None
    expires_ms: int | None = None

    def webhook_usable(self, now_s: float, margin_s: float) -> bool:
        if not self.webhook:
            return False
        return self.expires_ms is None or now_s + margin_s < self.expires_ms / 1000.0


class Routes:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._routes: dict[str, Route] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        self._routes = await asyncio.to_thread(self._read)

    def _read(self) -> dict[str, Route]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return {str(chat): Route(**fields) for chat, fields in raw.get("chats", {}).items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError, AttributeError) as exc:
            logger.warning("%s is unreadable (%s): replies wait for each chat's next message", self.path, exc)
            return {}

    def get(self, chat_id: str) -> Route | None:
        return self._routes.get(chat_id)

    async def note(self, chat_id: str, route: Route) -> None:
        """Remember ``route`` for ``chat_id``; write the file when something lasting changed."""
        old = self._routes.pop(chat_id, None)
        self._routes[chat_id] = route  # the newest chats last: the oldest go first
        while len(self._routes) > MAX_CHATS:
            self._routes.pop(next(iter(self._routes)))
        if old is None or replace(old, expires_ms=route.expires_ms) != route:
            await self._save()

    def forget_webhook(self, chat_id: str) -> None:
        """The chat's webhook was refused: answer through the OpenAPI until the next message."""
        route = self._routes.get(chat_id)
        if route is not None and route.webhook:
            self._routes[chat_id] = replace(route, webhook=None, expires_ms=None)

    async def _save(self) -> None:
        async with self._lock:
            text = json.dumps({"chats": {chat: asdict(r) for chat, r in self._routes.items()}})
            try:
                await asyncio.to_thread(atomic_write_text, self.path, text)
            except OSError as exc:
                logger.warning("could not write %s (%s); replies after a restart may wait for a new message",
                               self.path, exc)
