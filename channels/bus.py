"""The asyncio MessageBus between channels and the agent (DESIGN §2).

Inbound: ``publish_inbound`` writes the message to the inbox journal (when one is
configured) *before* it returns, so a channel may ack its platform right after; then it
enqueues on a bounded queue. A full queue applies back-pressure (``publish_inbound`` waits)
or, for callers that must answer at once, ``BusFull`` after ``timeout`` — in which case the
message was *not* accepted (it is retracted from the journal): answer 503 / don't ack.

Outbound: channels ``subscribe`` a send coroutine by channel name; ``publish_outbound``
queues the message on that channel's own queue and task. A failing send is logged and
never kills the dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from channels.inbox import InboxJournal
from channels.messages import InboundMessage, OutboundMessage
from config.errors import LucidError

logger = logging.getLogger(__name__)

OutboundHandler = Callable[[OutboundMessage], Awaitable[None]]
OutboundObserver = Callable[[OutboundMessage], None]


class BusFull(LucidError):
    """The inbound queue stayed full for the caller's timeout: answer 503 / retry later."""


class BusClosed(LucidError):
    """The bus is shutting down and accepts no new inbound messages."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """An inbound message plus the journal receipt the consumer acks once it is persisted."""

    msg: InboundMessage
    receipt: str | None = None
    replayed: bool = False  # from the journal at start: may already be in its session


class MessageBus:
    def __init__(self, *, maxsize: int = 1000, inbox: InboxJournal | None = None) -> None:
        self._inbound: asyncio.Queue[Delivery] = asyncio.Queue(maxsize=maxsize)
        self._routes: dict[str, tuple[asyncio.Queue[OutboundMessage], asyncio.Task[None]]] = {}
        self._replay: deque[Delivery] = deque()
        self._observers: list[OutboundObserver] = []
        self._inbox = inbox
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------
    async def __aenter__(self) -> MessageBus:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._inbox is not None:
            replay = await asyncio.to_thread(self._inbox.open)
            for receipt, msg in replay:
                logger.info("replaying inbound message for %s from the inbox", msg.session_key)
                # Not through the bounded queue: a journal may hold more than fits.
                self._replay.append(Delivery(msg, receipt, replayed=True))

    async def stop(self) -> None:
        self._closed = True
        await self.flush_outbound()
        for channel in list(self._routes):
            self.unsubscribe(channel)
        if self._inbox is not None:
            await asyncio.to_thread(self._inbox.close)

    def close_intake(self) -> None:
        """Refuse new inbound messages (graceful shutdown); queued ones still drain."""
        self._closed = True

    @property
    def accepting(self) -> bool:
        return not self._closed

    # -- inbound -------------------------------------------------------------------------
    @property
    def inbound_depth(self) -> int:
        return self._inbound.qsize() + len(self._replay)

    async def publish_inbound(self, msg: InboundMessage, *, timeout: float | None = None) -> bool:
        """Durably accept ``msg``. Returns False for a duplicate (already seen) message."""
        if self._closed:
            raise BusClosed("the gateway is shutting down; try again shortly")
        receipt = None
        if self._inbox is not None:
            if self._inbox.seen(msg.dedupe_id):
                return False
            receipt = await asyncio.to_thread(self._inbox.append, msg)
            if receipt is None:
                return False
        delivery = Delivery(msg, receipt)
        if timeout is None:
            await self._inbound.put(delivery)
            return True
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            async with asyncio.timeout(timeout):
                await self._inbound.put(delivery)
        except TimeoutError:
            # Not accepted: take it back out of the journal (and forget its dedupe id) so the
            # caller's 503 / missing ack is the truth and the platform's retry is welcome.
            if self._inbox is not None and receipt is not None:
                await asyncio.to_thread(self._inbox.retract, receipt, msg.dedupe_id)
            raise BusFull("the assistant is busy right now; please retry in a few seconds") from None
        return True

    async def consume_inbound(self) -> Delivery:
        if self._replay:
            return self._replay.popleft()
        return await self._inbound.get()

    async def ack(self, delivery: Delivery) -> None:
        """The consumer has persisted the message in its session."""
        if self._inbox is not None and delivery.receipt is not None:
            await asyncio.to_thread(self._inbox.done, delivery.receipt)

    # -- outbound ------------------------------------------------------------------------
    def subscribe(self, channel: str, handler: OutboundHandler) -> None:
        """Route ``channel``'s outbound messages to ``handler``, in order, on a task of its own.

        Each channel has its own queue and task, so a slow or rate-limited platform never
        delays replies on another one.
        """
        self.unsubscribe(channel)
        queue: asyncio.Queue[OutboundMessage] = asyncio.Queue()
        task = asyncio.create_task(self._dispatch(channel, queue, handler), name=f"bus-out-{channel}")
        self._routes[channel] = (queue, task)

    def has_route(self, channel: str) -> bool:
        return channel in self._routes

    def unsubscribe(self, channel: str) -> None:
        route = self._routes.pop(channel, None)
        if route is not None:
            route[1].cancel()

    def observe(self, observer: OutboundObserver) -> None:
        """Synchronous observers see every outbound message (webhook waiters, metrics)."""
        self._observers.append(observer)

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        for observer in self._observers:
            try:
                observer(msg)
            except Exception:
                logger.exception("outbound observer failed")
        route = self._routes.get(msg.target.channel)
        if route is None:
            if msg.kind in ("text", "error"):
                logger.warning("no channel %r to deliver a reply to", msg.target.channel)
            return
        route[0].put_nowait(msg)

    async def flush_outbound(self) -> None:
        """Wait until every queued outbound message has been handed to its channel."""
        for queue, task in list(self._routes.values()):
            if not task.done():
                await queue.join()

    async def _dispatch(
        self, channel: str, queue: asyncio.Queue[OutboundMessage], handler: OutboundHandler
    ) -> None:
        while True:
            msg = await queue.get()
            try:
                await handler(msg)
            except Exception:
                logger.exception("channel %s failed to deliver a %s message", channel, msg.kind)
            finally:
                queue.task_done()
