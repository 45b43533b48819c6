"""Finishing the turns a crash or a shutdown cut off (DESIGN §4.1), answered on their channel.

At start the agent loop asks ``TurnResumer.scan`` for every session whose transcript ends in
a pending turn (a user line without its answer, or tool calls without all their results) and
whose channel runs in this process, and queues each on that session's worker. ``resume``
then rebuilds the message from the transcript — its origin (``SessionRef``), its sender, the
role its gate stamped (``sender_role``), the task it came from — records tool calls that were
in flight as interrupted (never re-run), and either completes the transcript from an answer
the outbox already holds or runs the turn again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import InboundMessage, SessionRef
from lucidgate.config.schema import Config
from lucidgate.gateway.agent.memory_flush import FLUSH_KIND, NO_REPLY
from lucidgate.gateway.agent.roles import last_user_line, line_role
from lucidgate.gateway.agent.transcript_lines import answer_line, interrupted_call_lines, task_of
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.sessions import Session, SessionStore

logger = logging.getLogger(__name__)

RunTurn = Callable[[Session, TurnContext, str | None, int | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Resume:
    """A session worker's item: finish the turn a crash or a shutdown cut off."""

    session: Session
    origin: SessionRef


def resumed_message(config: Config, session: Session, origin: SessionRef, agent: str = "") -> InboundMessage:
    """The message whose turn ``session`` left pending, as it was admitted."""
    last_user = last_user_line(session)
    message_id = last_user.get("message_id")
    spender = last_user.get("spender")
    return InboundMessage(
        channel=origin.channel, chat_id=origin.chat_id, sender_id=str(last_user.get("sender_id", "")),
        text="", chat_type=origin.chat_type, thread_id=origin.thread_id,
        message_id=str(message_id) if message_id is not None else None, task=task_of(last_user),
        role=line_role(config, origin.channel, last_user),
        spender=spender if isinstance(spender, str) else None, agent=agent)


class TurnResumer:
    """Finds interrupted turns and finishes each once; ``run_turn`` runs a turn as the loop does."""

    def __init__(self, *, config: Config, bus: MessageBus, sessions: SessionStore,
                 context_for: Callable[[InboundMessage], TurnContext], run_turn: RunTurn,
                 agent: str = "") -> None:
        self.config = config
        self.agent = agent
        self.bus = bus
        self.sessions = sessions
        self.context_for = context_for
        self.run_turn = run_turn

    async def scan(self, busy: Callable[[str], bool]) -> AsyncIterator[Resume]:
        """The sessions with a pending turn whose channel runs here and that no worker holds,
        one at a time, so each can be queued (and start) before the next is read."""
        for key in await asyncio.to_thread(self.sessions.keys_on_disk):
            try:
                session = await self.sessions.get(key)
            except Exception:  # one unreadable session must not keep the others unanswered
                logger.exception("could not check %s for an interrupted turn", key)
                continue
            state = session.pending_state()
            origin = SessionRef.from_stored(session.metadata)
            if state is None or origin is None:
                continue
            if not self.bus.has_route(origin.channel):
                continue  # its channel is not running in this process; it stays pending
            if busy(key):
                continue  # being handled already (intake waits for this scan, so: a resume)
            logger.info("resuming an interrupted turn in %s (%s)", key, state)
            yield Resume(session, origin)

    async def resume(self, item: Resume) -> None:
        session = item.session
        try:
            msg = resumed_message(self.config, session, item.origin, self.agent)
            ctx = self.context_for(msg)
            if lines := interrupted_call_lines(session):
                await self.sessions.append(session, *lines, sync=True)
            answered = await self.bus.recorded_reply(ctx.target, msg.message_id) if msg.message_id else None
            if answered is not None:
                # Killed after the outbox had the answer, before the transcript did: the
                # outbox sends it; the transcript catches up instead of a second answer.
                await self.sessions.append(session, answer_line(answered.kind, answered.text))
                logger.info("%s: the answer was already in the outbox; transcript completed", session.key)
                return
            if last_user_line(session).get("kind") == FLUSH_KIND:
                # A memory flush cut off: it was silent and is not redone (the next cycle has one).
                await self.sessions.append(session, {"role": "assistant", "content": NO_REPLY,
                                                     "kind": FLUSH_KIND, "status": "cancelled"})
                return
            await self.run_turn(session, ctx, msg.message_id,
                                msg.task.token_budget if msg.task is not None else None)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("could not resume the turn in %s", session.key)
