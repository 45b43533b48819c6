"""Delivery lanes: how the bus hands outbound messages to a channel, one lane per chat.

Each subscribed channel gets a ``ChannelRoute``. Messages are put on the lane of their chat
(``chat_id`` + thread) and a lane sends strictly in order, so one chat's retries never delay
another chat, and a reply never overtakes an earlier one in the same chat.

Durable items (recorded in the ``Outbox`` by the bus before they get here) are retried until
the platform accepts them, following the channel's typed errors (``channels._ratelimit``):

* ``DeliveryRetry(after_s=...)`` / ``DeliveryUncertain`` / a non-permanent ``DeliveryFailed``
  / any unexpected exception — retried after ``after_s`` (a 429's retry_after) or an
  exponential backoff with jitter, until the item's deadline; then dead-lettered;
* ``DeliveryFailed(permanent=True)`` — dead-lettered at once (one warning line).

When the route starts it first loads the channel's undelivered items from the outbox (a
restart), and messages published meanwhile wait behind them, keeping per-chat order.
Typing and streaming previews go through the same lane (so they stay in order) but are
tried once: they are best-effort.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels._ratelimit import DeliveryFailed, DeliveryRetry
from channels.messages import OutboundMessage
from channels.outbox import Item, Outbox, chat_key
from config.backoff import backoff_delay

logger = logging.getLogger(__name__)

OutboundHandler = Callable[[OutboundMessage], Awaitable[None]]
Entry = tuple[OutboundMessage, Item | None]


@dataclass(slots=True)
class DeliveryStats:
    """Counters of this process (the outbox holds the durable counts)."""

    delivered: int = 0
    retried: int = 0
    dead: int = 0
    replayed: int = 0
    on_dead: list[Callable[[str], None]] = field(default_factory=list)


class _Lane:
    def __init__(self, route: ChannelRoute, key: str) -> None:
        self.route, self.key = route, key
        self.queue: deque[Entry] = deque()
        self.wake = asyncio.Event()
        self.settled = asyncio.Event()
        # Waiting out a retry delay: what queues behind it cannot go either, so a flush
        # (shutdown) does not wait for it; it stays durable in the outbox.
        self.backing_off = False
        self.task = asyncio.create_task(self._run(), name=f"out-{route.channel}-{key}")

    def put(self, entry: Entry) -> None:
        self.queue.append(entry)
        if not self.backing_off:
            self.settled.clear()
        self.wake.set()

    async def _run(self) -> None:
        while True:
            if not self.queue:
                self.settled.set()
                self.wake.clear()
                await self.wake.wait()
                continue
            self.settled.clear()
            msg, item = self.queue[0]
            try:
                await self.route.deliver(msg, item, self)
            except asyncio.CancelledError:
                raise
            except Exception:  # e.g. the disk is full while marking: the next start resends it
                logger.exception("%s: delivering a %s message failed", self.route.channel, msg.kind)
            self.queue.popleft()


class ChannelRoute:
    """One channel's lanes; ``put`` never waits, ``settle`` waits for what can go out now."""

    def __init__(self, channel: str, handler: OutboundHandler, outbox: Outbox | None,
                 stats: DeliveryStats, *, backoff_s: float = 1.0, max_backoff_s: float = 300.0) -> None:
        self.channel = channel
        self._handler = handler
        self._outbox = outbox
        self._stats = stats
        self._backoff_s, self._max_backoff_s = backoff_s, max_backoff_s
        self._lanes: dict[str, _Lane] = {}
        self._seen: set[int] = set()
        self._held: list[Entry] | None = [] if outbox is not None else None
        self._loader = asyncio.create_task(self._load(), name=f"out-{channel}-replay")

    async def _load(self) -> None:
        held, items = self._held, []
        try:
            if self._outbox is not None:
                items = await asyncio.to_thread(self._outbox.pending, self.channel)
        except Exception:
            logger.exception("%s: reading the outbox failed; undelivered items wait for the next start",
                             self.channel)
        finally:
            self._held = None
        if items:
            logger.info("%s: resending %d undelivered message(s) from the outbox", self.channel, len(items))
            self._stats.replayed += len(items)
        for item in items:
            self._enqueue((item.msg, item))
        for entry in held or ():
            self._enqueue(entry)

    def put(self, msg: OutboundMessage, item: Item | None) -> None:
        if self._held is not None:
            self._held.append((msg, item))
        else:
            self._enqueue((msg, item))

    def _enqueue(self, entry: Entry) -> None:
        item = entry[1]
        if item is not None:
            if item.id in self._seen:
                return  # both replayed from the outbox and queued live
            self._seen.add(item.id)
        key = chat_key(entry[0].target)
        lane = self._lanes.get(key)
        if lane is None or lane.task.done():
            lane = self._lanes[key] = _Lane(self, key)
        lane.put(entry)

    async def settle(self) -> None:
        """Wait until every lane is idle or waiting out a backoff (what is left stays durable)."""
        await asyncio.shield(self._loader)
        while True:
            lanes = [lane for lane in self._lanes.values() if not lane.task.done()]
            await asyncio.gather(*(lane.settled.wait() for lane in lanes))
            if all(lane.settled.is_set() for lane in self._lanes.values() if not lane.task.done()):
                return

    def cancel(self) -> list[asyncio.Task[None]]:
        tasks = [self._loader, *(lane.task for lane in self._lanes.values())]
        for task in tasks:
            task.cancel()
        self._lanes.clear()
        return tasks

    # -- one message -----------------------------------------------------------------------
    async def deliver(self, msg: OutboundMessage, item: Item | None, lane: _Lane) -> None:
        if item is None:
            try:
                await self._handler(msg)
            except (DeliveryRetry, DeliveryFailed) as exc:
                logger.debug("%s: a %s message was not delivered: %s", self.channel, msg.kind, exc)
            except Exception:
                logger.exception("channel %s failed to deliver a %s message", self.channel, msg.kind)
            return
        assert self._outbox is not None
        parts, failures = item.parts_done, 0
        while True:
            attempt = dataclasses.replace(item.msg, skip_parts=parts) if parts else item.msg
            try:
                await self._handler(attempt)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                parts = max(parts, int(getattr(exc, "parts_done", 0) or 0))
                if isinstance(exc, DeliveryFailed) and exc.permanent:
                    await self._dead(item, f"refused by the platform: {exc}")
                    return
                failures += 1
                self._stats.retried += 1
                await asyncio.to_thread(self._outbox.failed_attempt, item.id, _describe(exc), parts)
                now = time.time()
                if now >= item.deadline_at:
                    await self._dead(item, f"undeliverable until its deadline; last error: {_describe(exc)}")
                    return
                after = getattr(exc, "after_s", None)
                delay = float(after) if after is not None else backoff_delay(
                    failures, self._backoff_s, self._max_backoff_s)
                delay = min(delay, max(0.0, item.deadline_at - now))
                logger.info("%s: delivery to chat %s failed (%s); retrying in %.1fs",
                            self.channel, msg.target.chat_id, _describe(exc), delay)
                lane.settled.set()  # a backoff is not work a flush can wait for
                lane.backing_off = True
                try:
                    await asyncio.sleep(delay)
                finally:
                    lane.backing_off = False
                    lane.settled.clear()
                continue
            await asyncio.to_thread(self._outbox.delivered, item.id)
            self._stats.delivered += 1
            return

    async def _dead(self, item: Item, why: str) -> None:
        assert self._outbox is not None
        await asyncio.to_thread(self._outbox.dead, item.id, why)
        self._stats.dead += 1
        logger.warning("%s: dead-lettered a %s message for chat %s (outbox item %d): %s",
                       self.channel, item.msg.kind, item.msg.target.chat_id, item.id, why)
        for callback in self._stats.on_dead:
            try:
                callback(self.channel)
            except Exception:
                logger.exception("dead-letter observer failed")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
