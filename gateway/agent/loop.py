"""The AgentLoop: consumes the bus, one ordered worker per session (DESIGN §2).

Messages of one session are handled strictly in order; sessions run concurrently,
bounded by ``maxConcurrentSessions``. The user's message is appended to its session
(fsynced) before any LLM call and only then acked on the bus. ``/stop`` bypasses the
session's queue and acts on what the session's worker holds (``gateway.agent.session_work``).
On start, turns that a crash or a
shutdown cut off are resumed from the transcript's tail and answered on their channel
(``gateway.agent.resume``). A turn runs in the role the message's gate stamped on it
(``InboundMessage.role``); the loop never asks the config who the sender is.

Session workers are ``config.keyed`` workers: spawned by the first message, draining the
session's queue (messages, resumed turns, reminder lines), and retiring after
``gateway.workerIdleS`` without work; each session's state lives in its worker's slot. The
long-lived consumer and resumer tasks are watched (``TaskWatch``): a death is logged with its
traceback and turns ``alive()`` false, which ``/readyz`` reports.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from lucidgate.channels.bus import Delivery, MessageBus
from lucidgate.config.keyed import KeyedWorkers
from lucidgate.channels.messages import (
    InboundMessage,
    OutboundError,
    OutboundText,
    TurnUsage,
    OutboundTyping,
    SessionRef,
    Target,
)
from lucidgate.config.errors import LucidError
from lucidgate.config.schema import Config
from lucidgate.gateway.agent.chat_kind import settled_kind
from lucidgate.gateway.agent.commands import CommandRegistry, parse_command
from lucidgate.gateway.logs import turn_log_context
from lucidgate.gateway.agent.media_handover import move_media
from lucidgate.gateway.agent.memory_flush import MemoryFlush
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.agent.resume import Resume, TurnResumer
from lucidgate.gateway.agent.roles import OwnerSessions
from lucidgate.gateway.agent.runner import TurnRunner
from lucidgate.gateway.agent.session_work import InHand, Note, SessionWork, decide_stop
from lucidgate.gateway.agent.task_watch import TaskWatch
from lucidgate.gateway.model.task_budget import turn_budget
from lucidgate.gateway.model.usage import turn_role
from lucidgate.gateway.agent.transcript_lines import replayed_state, user_line
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.sessions import REMINDER_KIND, Session, SessionStore

logger = logging.getLogger(__name__)

STOPPED_NOTE = "[turn stopped by the user with /stop]"


class ConsolidationHooks(Protocol):
    async def before_turn(self, session: Session) -> None: ...
    def schedule(self, session_key: str) -> None: ...
    async def drain(self) -> None: ...


class AgentLoop:
    def __init__(self, *, config: Config, bus: MessageBus, sessions: SessionStore,
                 runner: TurnRunner, commands: CommandRegistry, owner_sessions: OwnerSessions,
                 consolidator: ConsolidationHooks | None = None,
                 metrics: Metrics | None = None, flush: MemoryFlush | None = None, agent: str = "",
                 media_from: Path | None = None) -> None:
        self.config = config
        self.agent_id = agent  # the agent whose messages this loop takes ("" the default)
        self.media_from = media_from  # where channels saved attachments, when not this workspace
        self.bus = bus
        self.sessions = sessions
        self.runner = runner
        self.commands = commands
        self.owner_sessions = owner_sessions
        self.consolidator = consolidator
        self.metrics = metrics
        self.flush = flush  # the silent memory-flush turn before a compaction
        self._workers: KeyedWorkers[Delivery | Resume | Note, SessionWork] = KeyedWorkers(
            "session", self._work, idle_s=config.gateway.worker_idle_s,
            on_start=sessions.pin, on_retire=sessions.unpin, new_state=lambda _key: SessionWork())
        self._side_tasks: set[asyncio.Task[None]] = set()  # /stop handlers
        self._running_turns = 0
        self._semaphore = asyncio.Semaphore(config.agent.max_concurrent_sessions)
        self._consumer: asyncio.Task[None] | None = None
        self._resumer: asyncio.Task[None] | None = None
        self._watch = TaskWatch()
        self._stopping = False
        # Back-pressure: stop taking from the bus while this many messages wait in sessions,
        # so the bus fills and channels see it (503 / no ack) instead of memory growing.
        self.max_queued = config.gateway.max_queued_messages
        self._room = asyncio.Event()
        self.recovery = TurnResumer(config=config, bus=bus, sessions=sessions,
                                   context_for=self.context_for, run_turn=self._run_resumed, agent=agent)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        self._resumer = asyncio.create_task(self.resume_interrupted(), name="agent-resume")
        self._consumer = asyncio.create_task(self._consume(), name="agent-consume")
        self._watch.watch(self._resumer, may_finish=True)
        self._watch.watch(self._consumer)

    def alive(self) -> tuple[bool, str]:
        """Whether the loop's long-lived tasks all run (``/readyz``), with a one-line detail."""
        return self._watch.healthy()

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop taking messages; let running turns finish within ``grace_s``, then cancel.

        A turn cancelled here is *not* marked stopped: its user message stays pending in the
        transcript and the next start resumes it. Reminder lines still queued are written
        (a reminder was sent; the transcript must say so).
        """
        self._stopping = True
        self._watch.stopping()
        for task in (self._consumer, self._resumer):
            if task is not None:
                task.cancel()
        if grace_s > 0:
            try:
                async with asyncio.timeout(grace_s):
                    await self._workers.wait_idle()
            except TimeoutError:
                pass
        notes = [(key, item) for key, item in self._workers.queued_items() if isinstance(item, Note)]
        workers = self._workers.cancel()
        for task in self._side_tasks:
            task.cancel()
        await asyncio.gather(*workers, *self._side_tasks, return_exceptions=True)
        for key, note in notes:
            await self._write_note(key, note)
        if self.consolidator is not None:
            # Background consolidation is crash-safe (history is written before the header
            # moves), so a slow summariser must not hold the exit hostage.
            try:
                async with asyncio.timeout(max(grace_s, 5.0)):
                    await self.consolidator.drain()
            except TimeoutError:
                logger.warning("background consolidation still running at shutdown; it resumes next time")

    @property
    def active_turns(self) -> int:
        return self._running_turns

    @property
    def queued(self) -> int:
        return self._workers.queued

    @property
    def session_workers(self) -> int:
        """Session worker tasks alive now (busy or waiting out their idle time)."""
        return self._workers.workers

    async def idle(self) -> None:
        """Wait until no session has queued or running work (tests, benchmarks, CLI).

        Cancelling the waiter (a drain's grace period running out) leaves the turns running,
        to be counted and stopped by ``stop``."""
        await self._workers.wait_idle()

    # -- intake ----------------------------------------------------------------------------
    async def _consume(self) -> None:
        # Interrupted turns first: a message replayed from the inbox for the same chat must
        # queue behind the resumed turn, or its turn would take the session and the older
        # message would never get its own answer.
        if self._resumer is not None:
            await asyncio.wait({self._resumer})
        while True:
            while self.queued >= self.max_queued:
                self._room.clear()
                await self._room.wait()
            delivery = await self.bus.consume_inbound(self.agent_id)
            self.submit(delivery)

    def submit(self, delivery: Delivery) -> None:
        if self._stopping:
            return  # left unacked in the inbox: the next start replays it
        msg = delivery.msg
        if self.metrics is not None:
            self.metrics.message_in(msg.channel)
        parsed = parse_command(msg.text)
        if parsed is not None and parsed[0] == "stop":
            # Decided now, before anything queued after it can start: a /stop acts on what
            # ran when it arrived, never on the message the user sent next.
            work = self._workers.state(msg.session_key)
            ctx = self.context_for(msg)
            _, reply = decide_stop(work.in_hand if work is not None else None, ctx)
            task = asyncio.create_task(self._answer_stop(delivery, ctx, reply), name=f"stop-{msg.session_key}")
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
            return
        self._workers.put(msg.session_key, delivery)

    async def _work(self, key: str, item: Delivery | Resume | Note) -> None:
        self._room.set()
        if isinstance(item, Note):
            await self._write_note(key, item)
            return
        work = self._work_state(key)
        if isinstance(item, Resume):
            work.in_hand = InHand("turn", None)
        else:
            parsed = parse_command(item.msg.text)
            work.in_hand = (InHand("command", item.msg.sender_id, label=f"/{parsed[0]}") if parsed
                            else InHand("turn", item.msg.sender_id))
        try:
            if isinstance(item, Resume):
                await self.recovery.resume(item)
                return
            async with self._semaphore:
                with turn_log_context(key, item.msg.channel):  # JSON log lines carry the turn
                    await self._handle(item)
        finally:
            work.in_hand = None

    def _work_state(self, key: str) -> SessionWork:
        work = self._workers.state(key)
        if work is None:  # only called from the key's own worker, which holds its slot
            raise RuntimeError(f"no session worker for {key}")
        return work

    def _in_hand(self, key: str) -> InHand:
        hand = self._work_state(key).in_hand
        if hand is None:
            raise RuntimeError(f"the worker of {key} holds no item")
        return hand

    # -- lines from outside a turn ----------------------------------------------------------
    async def record_reminder(self, session_key: str, text: str) -> None:
        """A sent reminder goes into its chat's transcript, so the model knows it reminded
        the user — between turns only: a line inside a running turn could land between a
        tool call and its result. While the session works the line queues behind its work."""
        note = Note(({"role": "assistant", "content": text, "kind": REMINDER_KIND},))
        if self._workers.busy(session_key) and not self._stopping:
            self._workers.put(session_key, note)
        else:
            await self._write_note(session_key, note)

    async def _write_note(self, key: str, note: Note) -> None:
        session = await self.sessions.get(key)
        await self.sessions.append(session, *note.lines)

    # -- one message -----------------------------------------------------------------------
    def context_for(self, msg: InboundMessage) -> TurnContext:
        """The turn's context, in the role the message's gate stamped on it."""
        role = msg.role
        if msg.task is not None:  # a scheduled turn runs as its creator, never above them
            role = msg.task.role if msg.task.internal or role == "owner" else "guest"
        return TurnContext(
            session_key=msg.session_key, channel=msg.channel, chat_id=msg.chat_id,
            sender_id=msg.sender_id, role=role,
            chat_type=msg.chat_type, workspace=self.config.workspace, thread_id=msg.thread_id,
            message_id=msg.message_id, spender=msg.spender,
        )

    async def _handle(self, delivery: Delivery) -> None:
        msg = delivery.msg
        ctx = self.context_for(msg)
        try:
            parsed = parse_command(msg.text)
            if parsed is not None:
                await self.bus.ack(delivery)
                reply = await self.commands.dispatch(ctx, *parsed)
                await self._reply(ctx.target, reply, msg.message_id)
                return
            refusal = self._refuse(msg)
            if refusal is not None:
                await self.bus.ack(delivery)
                await self.bus.publish_outbound(OutboundError(ctx.target, refusal, msg.message_id))
                return
            session = await self.sessions.get(msg.session_key, origin=SessionRef.of(msg).stored())
            kind = await settled_kind(self.sessions, self.owner_sessions, session, msg.chat_type)
            if kind != ctx.chat_type:  # once shared, shared for good
                ctx = replace(ctx, chat_type=kind)
            # A replayed message whose user line was written before the crash is answered only
            # if its turn never finished (the journal's "done" mark may simply have been lost).
            state = await replayed_state(self.sessions, session, delivery.receipt) if delivery.replayed else "new"
            if state == "new":
                if msg.media and self.media_from is not None:  # into this agent's workspace first
                    await asyncio.to_thread(move_media, self.media_from, self.config.workspace, msg.media)
                await self.sessions.append(session, user_line(msg, delivery.receipt), sync=True)
            await self.bus.ack(delivery)
            if state == "finished":
                return
            if ctx.is_owner_private and msg.task is None:
                await asyncio.to_thread(self.owner_sessions.add_persist, msg.session_key)
            budget = msg.task.token_budget if msg.task is not None else None
            await self._run_turn(session, ctx, reply_to=msg.message_id, budget=budget)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("handling a message for %s failed", msg.session_key)
            await self.bus.publish_outbound(OutboundError(
                ctx.target, "Something went wrong on my side; your message is saved.", msg.message_id))

    def _refuse(self, msg: InboundMessage) -> str | None:
        limit = self.config.agent.max_message_chars
        if not msg.text.strip() and not msg.media:
            return "Your message was empty, so there is nothing to answer."
        if len(msg.text) > limit:
            return (f"Your message is {len(msg.text):,} characters; the limit is {limit:,} "
                    "(agents.defaults.maxMessageChars). Please send it in parts or as a file.")
        return None

    async def _run_turn(self, session: Session, ctx: TurnContext, *, reply_to: str | None,
                        budget: int | None = None) -> None:
        """One agent turn, as a task ``/stop`` can cancel; replies on the origin channel."""
        started = time.monotonic()
        hand = self._in_hand(ctx.session_key)
        hand.sender_id = ctx.sender_id
        if hand.stop_requested:  # /stop arrived while the turn was starting
            await self._stopped(session, ctx, reply_to)
            return
        await self.bus.publish_outbound(OutboundTyping(ctx.target))
        turn = asyncio.create_task(self._turn_body(session, ctx, budget, reply_to), name=f"turn-{ctx.session_key}")
        hand.task = turn
        self._running_turns += 1
        try:
            await turn
        except asyncio.CancelledError:
            if hand.stop_requested and turn.cancelled():
                await self._stopped(session, ctx, reply_to)
                return
            raise
        except Exception as exc:
            if isinstance(exc, LucidError):
                logger.warning("turn for %s failed: %s", ctx.session_key, exc)
                why = str(exc)
            else:  # a bug or a malformed provider answer: still close the turn, never re-run it
                logger.exception("turn for %s crashed", ctx.session_key)
                why = "something went wrong on my side (the details are in the gateway log)"
            async def write() -> None:  # outbox, transcript, send — as for answers
                await self.sessions.append(session, {"role": "assistant", "content": f"(no reply: {why})",
                                                     "status": "error"})

            await self.bus.publish_outbound(OutboundError(ctx.target, f"Sorry — {why}.", reply_to),
                                            before_route=write)
            return
        finally:
            self._running_turns -= 1
            if self.metrics is not None:
                self.metrics.observe_turn(time.monotonic() - started)
        session = self.sessions.cached(session.key) or session  # the answer went out in the turn
        if self.flush is not None and self.flush.due(session, ctx):
            hand.kind, hand.label, hand.task = "flush", "saving this chat's notes to memory", None
            await self.flush.run(session, ctx)
        if self.consolidator is not None:
            self.consolidator.schedule(session.key)

    async def _stopped(self, session: Session, ctx: TurnContext, reply_to: str | None) -> None:
        await self.sessions.append(session, {"role": "assistant", "content": STOPPED_NOTE,
                                             "status": "cancelled"})
        await self._reply(ctx.target, "Stopped.", reply_to)

    async def _turn_body(self, session: Session, ctx: TurnContext, budget: int | None = None,
                         reply_to: str | None = None) -> str:
        with turn_role(ctx.role, ctx.payer):  # this task's model calls count against the role's budget
            return await self._turn_steps(session, ctx, budget, reply_to)

    async def _turn_steps(self, session: Session, ctx: TurnContext, budget: int | None,
                          reply_to: str | None) -> str:
        if self.consolidator is not None:
            await self.consolidator.before_turn(session)
            session = self.sessions.cached(session.key) or session
        with turn_budget(budget, "task"):
            result = await self.runner.run(
                session, ctx, on_final=lambda text, write, usage: self._reply(
                    ctx.target, text, reply_to, before_route=write, usage=usage))
        return result.text

    async def _reply(self, target: Target, text: str, reply_to: str | None, *,
                     before_route: Callable[[], Awaitable[None]] | None = None,
                     usage: TurnUsage | None = None) -> None:
        await self.bus.publish_outbound(OutboundText(target, text, in_reply_to=reply_to, usage=usage),
                                        before_route=before_route)
        if self.metrics is not None:
            self.metrics.message_out(target.channel)

    async def _answer_stop(self, delivery: Delivery, ctx: TurnContext, reply: str) -> None:
        await self.bus.ack(delivery)
        await self._reply(ctx.target, reply, delivery.msg.message_id)

    # -- recovery --------------------------------------------------------------------------
    async def resume_interrupted(self) -> None:
        """Queue the turns a crash or shutdown cut off on their sessions' workers."""
        async for item in self.recovery.scan(self._workers.busy):
            self._workers.put(item.session.key, item)

    async def _run_resumed(self, session: Session, ctx: TurnContext, reply_to: str | None,
                           budget: int | None) -> None:
        async with self._semaphore:
            await self._run_turn(session, ctx, reply_to=reply_to, budget=budget)
