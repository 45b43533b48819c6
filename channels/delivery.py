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

Lanes are ``config.keyed`` workers: a lane idle for ``lane_idle_s`` retires, and an outbox
item's id is remembered (to drop a replayed duplicate) only while the item is on a lane, so a
stream of distinct chats leaves nothing behind once it stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry
from lucidgate.config.keyed import KeyedWorkers
from lucidgate.channels.messages import OutboundMessage
from lucidgate.channels.outbox import Item, Outbox, chat_key
from lucidgate.config.backoff import backoff_delay

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


class ChannelRoute:
    """One channel's lanes; ``put`` never waits, ``settle`` waits for what can go out now."""

    def __init__(self, channel: str, handler: OutboundHandler, outbox: Outbox | None,
                 stats: DeliveryStats, *, backoff_s: float = 1.0, max_backoff_s: float = 300.0,
                 lane_idle_s: float, max_lanes: int = 4096) -> None:
        self.channel = channel
        self._handler = handler
        self._outbox = outbox
        self._stats = stats
        self._backoff_s, self._max_backoff_s = backoff_s, max_backoff_s
        self._lanes: KeyedWorkers[Entry] = KeyedWorkers(
            f"out-{channel}", self._send, idle_s=lane_idle_s, limit=max_lanes)
        self._seen: set[int] = set()  # outbox ids on a lane now
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
        self._lanes.put(chat_key(entry[0].target), entry)

    @property
    def lanes(self) -> int:
        """Lane tasks alive now."""
        return self._lanes.workers

    @property
    def in_flight(self) -> int:
        """Outbox items on a lane now (queued or being sent)."""
        return len(self._seen)

    async def settle(self) -> None:
        """Wait until every lane is idle or waiting out a backoff (what is left stays durable)."""
        await asyncio.shield(self._loader)
        await self._lanes.wait_idle()

    def cancel(self) -> list[asyncio.Task[None]]:
        self._loader.cancel()
        return [self._loader, *self._lanes.cancel()]

    # -- one message -----------------------------------------------------------------------
    async def _send(self, key: str, entry: Entry) -> None:
        msg, item = entry
        try:
            await self._deliver(msg, item, key)
        except asyncio.CancelledError:
            raise
        except Exception:  # e.g. the disk is full while marking: the next start resends it
            logger.exception("%s: delivering a %s message failed", self.channel, msg.kind)
        finally:
            if item is not None:
                self._seen.discard(item.id)

    async def _deliver(self, msg: OutboundMessage, item: Item | None, lane: str) -> None:
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
                # A backoff is not work a flush can wait for: what queues behind it cannot go either.
                with self._lanes.resting(lane):
                    await asyncio.sleep(delay)
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
