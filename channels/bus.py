"""The asyncio MessageBus between channels and the agent (DESIGN §2).

Inbound: ``publish_inbound`` writes the message to the inbox journal (when one is
configured) *before* it returns, so a channel may ack its platform right after; then it
enqueues on a bounded queue. A full queue applies back-pressure (``publish_inbound`` waits)
or, for callers that must answer at once, ``BusFull`` after ``timeout`` — in which case the
message was *not* accepted (it is retracted from the journal): answer 503 / don't ack.
With several agents (``agents.list``) the bus's ``Router`` (``channels.routing``) stamps each
message's agent before it is journalled, and each agent has its own queue: an agent's loop
takes only its messages (``consume_inbound(agent)``), and all of them ack into the one journal.

Outbound: channels ``subscribe`` a send coroutine by channel name. ``publish_outbound``
records every final item (text, error) in the durable ``Outbox`` (when one is configured)
*before* any send attempt, then puts it on its chat's delivery lane
(``channels.delivery``): in order per chat, retried on transient failures until its
deadline, dead-lettered on a permanent refusal, resent after a restart if it was never
marked delivered. A failing send never kills a lane.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lucidgate.channels.delivery import ChannelRoute, DeliveryStats
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, OutboundError, OutboundMessage, OutboundText, Target
from lucidgate.channels.outbox import Outbox, is_durable
from lucidgate.channels.routing import Router
from lucidgate.config.errors import LucidError
from lucidgate.config.schema import GatewayConfig

logger = logging.getLogger(__name__)

OutboundHandler = Callable[[OutboundMessage], Awaitable[None]]
OutboundObserver = Callable[[OutboundMessage], None]
RecordedHook = Callable[[OutboundMessage], Awaitable[object]]


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
    def __init__(self, *, maxsize: int = GatewayConfig.default_of("inbound_queue_size"),
                 inbox: InboxJournal | None = None, outbox: Outbox | None = None, retry_backoff_s: float = 1.0,
                 lane_idle_s: float = GatewayConfig.default_of("worker_idle_s"),
                 router: Router | None = None, agent_workspaces: Mapping[str, Path] | None = None) -> None:
        """``agent_workspaces``: each agent's workspace but the default's (several agents), where
        the channels find the files of that agent's replies (``channels.outfiles.FileRoots``)."""
        # One queue (and replay list) per agent: each agent's loop takes only its messages.
        self._maxsize = maxsize
        self._queues: dict[str, asyncio.Queue[Delivery]] = {}
        self._router = router
        self.agent_workspaces: Mapping[str, Path] = dict(agent_workspaces or {})
        self._routes: dict[str, ChannelRoute] = {}
        self._cancelled: set[asyncio.Task[None]] = set()
        self.outbox = outbox
        self.delivery = DeliveryStats()
        self._retry_backoff_s = retry_backoff_s
        self._lane_idle_s = lane_idle_s
        self._replays: dict[str, deque[Delivery]] = {}
        self._observers: list[OutboundObserver] = []
        self._recorded: dict[str, RecordedHook] = {}
        self._inbox = inbox
        self._closed = False
        # Message ids whose sender reads the answer as it is written (a webhook request with
        # ``stream: true``): their turns stream even on a channel that does not by default.
        self.live_readers: set[str] = set()
        self.purge_interval_s = 6 * 3600.0
        self._purger: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------
    async def __aenter__(self) -> MessageBus:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self.outbox is not None and self._purger is None:
            self._purger = asyncio.create_task(self._purge_outbox(), name="outbox-purge")
        if self._inbox is not None:
            replay = await asyncio.to_thread(self._inbox.open)
            for receipt, msg in replay:
                logger.info("replaying inbound message for %s from the inbox", msg.session_key)
                # Not through the bounded queue: a journal may hold more than fits. An agent
                # no longer configured takes nothing: its messages stay pending in the journal.
                self._replays.setdefault(msg.agent, deque()).append(Delivery(msg, receipt, replayed=True))

    async def stop(self) -> None:
        self._closed = True
        await self.flush_outbound()
        for channel in list(self._routes):
            self.unsubscribe(channel)
        if self._inbox is not None:
            await asyncio.to_thread(self._inbox.close)
        if self._cancelled:
            await asyncio.gather(*self._cancelled, return_exceptions=True)
        if self._purger is not None:
            self._purger.cancel()
            await asyncio.gather(self._purger, return_exceptions=True)
            self._purger = None
        if self.outbox is not None:
            await self.outbox.aclose()

    async def _purge_outbox(self) -> None:
        """Delivered rows older than the outbox keeps them go, at start and then every
        ``purge_interval_s`` — in a worker thread; a failure is logged and tried next time."""
        assert self.outbox is not None
        while True:
            try:
                purged = await asyncio.to_thread(self.outbox.purge)
                if purged:
                    logger.info("outbox: purged %d delivered item(s) older than a week", purged)
            except Exception:
                logger.exception("outbox: purging delivered items failed")
            await asyncio.sleep(self.purge_interval_s)

    def close_intake(self) -> None:
        """Refuse new inbound messages (graceful shutdown); queued ones still drain."""
        self._closed = True

    @property
    def accepting(self) -> bool:
        return not self._closed

    # -- inbound -------------------------------------------------------------------------
    @property
    def inbound_depth(self) -> int:
        return sum(q.qsize() for q in self._queues.values()) + sum(len(r) for r in self._replays.values())

    def inbound_depth_of(self, agent: str) -> int:
        """Messages waiting for ``agent`` ("": the default agent) on the bus."""
        queue, replay = self._queues.get(agent), self._replays.get(agent)
        return (queue.qsize() if queue is not None else 0) + (len(replay) if replay is not None else 0)

    def routed(self, msg: InboundMessage, agent: str | None = None) -> InboundMessage:
        """``msg`` as ``publish_inbound`` will accept it: stamped with its agent and the sender's
        role there, by the bindings or, given ``agent`` (an id), for that agent. A caller that
        must name the session before publishing (the webhook's reply) asks here first."""
        if self._router is None:
            return msg
        return self._router.route(msg) if agent is None else self._router.route_to(msg, agent)

    def _queue(self, agent: str) -> asyncio.Queue[Delivery]:
        queue = self._queues.get(agent)
        if queue is None:
            queue = self._queues[agent] = asyncio.Queue(maxsize=self._maxsize)
        return queue

    async def publish_inbound(self, msg: InboundMessage, *, timeout: float | None = None) -> bool:
        """Durably accept ``msg``, routed to its agent first (``channels.routing``) so the
        journal holds the route. Returns False for a duplicate (already seen) message."""
        if self._closed:
            raise BusClosed("the gateway is shutting down; try again shortly")
        if self._router is not None:
            msg = self._router.route(msg)
        inbound = self._queue(msg.agent)
        receipt = None
        if self._inbox is not None:
            if self._inbox.seen(msg.dedupe_id):
                return False
            receipt = await asyncio.to_thread(self._inbox.append, msg)
            if receipt is None:
                return False
        delivery = Delivery(msg, receipt)
        if timeout is None:
            await inbound.put(delivery)
            return True
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            async with asyncio.timeout(timeout):
                await inbound.put(delivery)
        except TimeoutError:
            # Not accepted: take it back out of the journal (and forget its dedupe id) so the
            # caller's 503 / missing ack is the truth and the platform's retry is welcome.
            if self._inbox is not None and receipt is not None:
                await asyncio.to_thread(self._inbox.retract, receipt, msg.dedupe_id)
            raise BusFull("the assistant is busy right now; please retry in a few seconds") from None
        return True

    async def consume_inbound(self, agent: str = "") -> Delivery:
        """The next message for ``agent`` ("": the default agent), replayed ones first."""
        replay = self._replays.get(agent)
        if replay:
            return replay.popleft()
        return await self._queue(agent).get()

    async def ack(self, delivery: Delivery) -> None:
        """The consumer has persisted the message in its session."""
        if self._inbox is not None and delivery.receipt is not None:
            await asyncio.to_thread(self._inbox.done, delivery.receipt)

    # -- outbound ------------------------------------------------------------------------
    def subscribe(self, channel: str, handler: OutboundHandler) -> None:
        """Route ``channel``'s outbound messages to ``handler``, per chat, in order.

        Each chat has its own lane, so a slow or rate-limited chat never delays replies to
        another one. Undelivered items of ``channel`` in the outbox are resent first.
        """
        self.unsubscribe(channel)
        self._routes[channel] = ChannelRoute(channel, handler, self.outbox, self.delivery,
                                             backoff_s=self._retry_backoff_s, lane_idle_s=self._lane_idle_s)

    def has_route(self, channel: str) -> bool:
        return channel in self._routes

    def unsubscribe(self, channel: str) -> None:
        """Stop delivering to ``channel``; what is undelivered stays in the outbox."""
        route = self._routes.pop(channel, None)
        if route is not None:
            for task in route.cancel():
                self._cancelled.add(task)
                task.add_done_callback(self._cancelled.discard)

    def observe(self, observer: OutboundObserver) -> None:
        """Synchronous observers see every outbound message (webhook waiters, metrics)."""
        self._observers.append(observer)

    def on_recorded(self, channel: str, hook: RecordedHook | None) -> None:
        """Call ``hook`` for each final message of ``channel`` once it is durable (recorded in
        the outbox, its transcript line written), before it joins its chat's delivery lane.

        What must not wait behind the lane goes here: the webhook answers a waiting HTTP
        request at this point, even while an earlier callback of the same chat is backing off
        in the lane. ``None`` removes the hook. Replayed items (a restart) do not pass here."""
        if hook is None:
            self._recorded.pop(channel, None)
        else:
            self._recorded[channel] = hook

    async def publish_outbound(self, msg: OutboundMessage, *,
                               before_route: Callable[[], Awaitable[None]] | None = None) -> None:
        """Record ``msg`` in the outbox (when durable), then run ``before_route``, then hand it
        to its channel. The agent writes the answer to the transcript in ``before_route``: a
        crash before it leaves the answer in the outbox (sent at the next start), and the
        caller sees the transcript already hold the answer once the channel has it."""
        for observer in self._observers:
            try:
                observer(msg)
            except Exception:
                logger.exception("outbound observer failed")
        route = self._routes.get(msg.target.channel)
        if route is None:
            if msg.kind in ("text", "error"):
                logger.warning("no channel %r to deliver a reply to", msg.target.channel)
            if before_route is not None:
                await before_route()
            return
        item = None
        if self.outbox is not None and is_durable(msg):
            item = await asyncio.to_thread(self.outbox.record, msg)  # type: ignore[arg-type]
        if before_route is not None:
            await before_route()
        hook = self._recorded.get(msg.target.channel)
        if hook is not None and is_durable(msg):
            try:
                await hook(msg)
            except Exception:  # the lane still delivers it
                logger.exception("%s: the recorded-message hook failed", msg.target.channel)
        # Looked up again: the channel may have been replaced while the record was written.
        route = self._routes.get(msg.target.channel)
        if route is not None:  # else the channel stopped meanwhile: the outbox keeps the item
            route.put(msg, item)

    @property
    def delivery_lanes(self) -> int:
        """Delivery lane tasks alive now, over every channel (idle lanes retire)."""
        return sum(route.lanes for route in self._routes.values())

    @property
    def delivery_in_flight(self) -> int:
        """Outbox items on a lane now, over every channel."""
        return sum(route.in_flight for route in self._routes.values())

    async def flush_outbound(self) -> None:
        """Wait until every lane has sent what it can now (items in a backoff stay durable)."""
        for route in list(self._routes.values()):
            await route.settle()

    async def recorded_reply(self, target: Target, message_id: str) -> OutboundText | OutboundError | None:
        """The answer the outbox already holds for ``message_id`` (None without an outbox)."""
        if self.outbox is None:
            return None
        return await asyncio.to_thread(self.outbox.reply_to, target, message_id)

    async def outbox_counts(self) -> dict[str, int] | None:
        """``pending``/``delivered``/``dead`` rows of the outbox, or None without one."""
        if self.outbox is None:
            return None
        return await asyncio.to_thread(self.outbox.counts)

    async def outbox_counts_by_channel(self) -> dict[str, dict[str, int]]:
        """The outbox's rows by channel and state (empty without an outbox)."""
        if self.outbox is None:
            return {}
        return await asyncio.to_thread(self.outbox.counts_by_channel)
