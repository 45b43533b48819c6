"""Callers waiting for the answer to a message they published (the terminal, the OpenAI endpoint).

A request-reply channel publishes an inbound message under a fresh id and waits; the answer
comes back on the bus naming that id (``in_reply_to``) and resolves the caller's future.
At stop every caller still waiting is cancelled, so none waits for a reply that cannot come.
``AnsweringChannel`` is that lifecycle for such a channel.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import OutboundMessage

T = TypeVar("T")


class ReplyWaiters(Generic[T]):
    """One future per message id whose answer someone is waiting for."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[T]] = {}

    def expect(self, message_id: str) -> asyncio.Future[T]:
        """A future for the answer to ``message_id`` (publish the message after this)."""
        self._futures[message_id] = fut = asyncio.get_running_loop().create_future()
        return fut

    def take(self, message_id: str) -> asyncio.Future[T] | None:
        """The future waiting for ``message_id``'s answer, no longer tracked here (None: nobody asked)."""
        return self._futures.pop(message_id, None)

    def cancel_all(self) -> None:
        """The channel stops: no answer will come to anyone still waiting."""
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()


class AnsweringChannel(Generic[T]):
    """A channel whose callers publish and wait (``_waiters``); it answers them in ``send``."""

    name: str

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self._waiters: ReplyWaiters[T] = ReplyWaiters()

    async def start(self) -> None:
        self.bus.subscribe(self.name, self.send)

    async def stop(self) -> None:
        self.bus.unsubscribe(self.name)
        self._waiters.cancel_all()

    async def send(self, msg: OutboundMessage) -> None:
        raise NotImplementedError
