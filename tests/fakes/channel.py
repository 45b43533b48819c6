"""A ``FakeChannel`` that records what the agent sent and can inject inbound messages."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import InboundMessage, OutboundMessage, Role


class FakeChannel:
    """A channel stand-in. Like a real channel's gate, it stamps each message's role: ``owner``
    for a sender in ``owners`` (by default the terminal user, ``local``), else ``guest``."""

    def __init__(self, bus: MessageBus, name: str = "fake", *, owners: Collection[str] = ("local",)) -> None:
        self.name = name
        self.owners = frozenset(owners)
        self.bus = bus
        self.sent: list[OutboundMessage] = []
        self.reply_count = 0
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()

    async def start(self) -> None:
        self.bus.subscribe(self.name, self.send)

    async def stop(self) -> None:
        self.bus.unsubscribe(self.name)

    async def send(self, msg: OutboundMessage) -> None:
        self.sent.append(msg)
        if msg.kind in ("text", "error"):
            self.reply_count += 1
        self._changed.set()

    def replies(self, chat_id: str | None = None) -> list[OutboundMessage]:
        return [m for m in self.sent if m.kind in ("text", "error")
                and (chat_id is None or m.target.chat_id == chat_id)]

    async def say(self, text: str, *, chat_id: str = "1", sender_id: str = "owner",
                  chat_type: str = "private", message_id: str | None = None, role: Role | None = None) -> str:
        message_id = message_id or f"m{next(self._ids)}"
        if role is None:
            role = "owner" if sender_id in self.owners else "guest"
        await self.bus.publish_inbound(InboundMessage(
            channel=self.name, chat_id=chat_id, sender_id=sender_id, text=text,
            chat_type=chat_type, message_id=message_id, role=role))  # type: ignore[arg-type]
        return message_id

    async def wait_replies(self, count: int, timeout: float = 60.0) -> list[OutboundMessage]:
        async def until() -> None:
            while self.reply_count < count:
                self._changed.clear()
                await self._changed.wait()
        await asyncio.wait_for(until(), timeout)
        return self.replies()
