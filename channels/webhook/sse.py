"""``POST /v1/messages`` with ``stream: true``: the answer as server-sent events.

The turn is the same turn as without streaming — the message is journalled first, the
final reply is recorded (and, for a callback, sent from the durable outbox) exactly as
always. Streaming only adds previews on the way: ``activity`` events name the step that
runs ("running grep…"), ``progress`` events carry the answer so far (each one replaces the
last; a client shows the newest), and one final ``reply`` event carries the same JSON a
non-streaming request gets (``MessageReply``). When the answer takes longer than
``waitTimeoutS`` the stream ends with an ``error`` event saying where the answer will go.

Previews are best-effort: a slow reader makes the queue drop older previews rather than
hold the turn back (only the newest preview matters), and a client that goes away does
not stop the turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

__all__ = ["PreviewFeeds", "event_stream", "sse"]

# Previews waiting for a slow client; older ones are dropped first (the newest says it all).
MAX_QUEUED_PREVIEWS = 16


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


class PreviewFeeds:
    """The open streams per message id; the channel pushes previews into them."""

    def __init__(self, live_readers: set[str]) -> None:
        self._feeds: dict[str, set[asyncio.Queue[tuple[str, str]]]] = {}
        self._live = live_readers  # the bus's: tells the turn to stream for these messages

    def open(self, message_id: str) -> asyncio.Queue[tuple[str, str]]:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(MAX_QUEUED_PREVIEWS)
        self._feeds.setdefault(message_id, set()).add(queue)
        self._live.add(message_id)
        return queue

    def close(self, message_id: str, queue: asyncio.Queue[tuple[str, str]]) -> None:
        feeds = self._feeds.get(message_id)
        if feeds is not None:
            feeds.discard(queue)
            if not feeds:
                del self._feeds[message_id]
                self._live.discard(message_id)

    def push(self, message_id: str | None, event: str, text: str) -> None:
        for queue in self._feeds.get(message_id or "", ()):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait((event, text))


async def event_stream(queue: asyncio.Queue[tuple[str, str]], answer: asyncio.Future[Any], *,
                       timeout_s: float, finish: Callable[[bool], Awaitable[tuple[str, dict[str, Any]]]],
                       close: Callable[[], None]) -> AsyncIterator[str]:
    """Previews until the answer (or the wait timeout), then ``finish(answered)``'s event."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while not answer.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, answer}, timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                event, text = getter.result()
                yield sse(event, {"text": text})
            else:
                getter.cancel()
        event, data = await finish(answer.done())
        yield sse(event, data)
    finally:
        close()
