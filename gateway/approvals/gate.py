"""The held-action flow: hold an owner-power call, ask the owner, run it once or not at all.

``screen`` runs before every tool call of a turn. In an owner's turn that has seen words that
are not the owner's (``TurnTaint``; every turn with ``tools.approvals: always``), a call with
owner power (the tool's ``owner_power``) is not run: it becomes an ``ApprovalRequest``, the
owner is asked in their private chat, and the model reads that the action is held. The
session worker never waits for the answer.

``approve`` (the owner's ``/approve <id>``, in a private chat) runs exactly the bound action
once, in the context of the chat that asked, and feeds the outcome back into that chat as an
internal turn, so the model can tell the people there; ``deny`` and expiry tell that chat the
action was not run. Every decision is logged. Expiry is one timer task that sleeps until the
next deadline (woken when a request is added), so nothing polls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.messages import CHAT_TYPES, ChatType, InboundMessage, OutboundText, ScheduledTask, Target
from lucidgate.channels.registry import command_text
from lucidgate.gateway.approvals.prompt import held_note, owner_prompt, result_text
from lucidgate.gateway.approvals.store import ApprovalRequest, ApprovalStore, canonical
from lucidgate.gateway.approvals.taint import TurnTaint
from lucidgate.gateway.tools.base import ToolOutput, ToolRegistry
from lucidgate.gateway.tools.turn import TurnContext

logger = logging.getLogger(__name__)

SENDER = "approvals"  # the sender of the outcome turns this module feeds back into a chat
# The owner's private chats to ask in, for a turn in ``ctx`` (first is used).
OwnerChats = Callable[[TurnContext], list[Target]]


def owner_private_chats(owner_sessions: Collection[str], reachable: Callable[[str], bool], *,
                        agent: str = "") -> OwnerChats:
    """Where to ask: the chat itself when it is the owner's private one; else the owner's
    private chat on the same channel; else any of the owner's private chats (the keys of
    chats the owner has spoken in privately, ``channel:chat``) — only on channels that are
    running (``reachable``: a heartbeat's own chat has no reader). A non-default ``agent``'s
    keys carry its id first (``agent:channel:chat``)."""
    prefix = f"{agent}:" if agent else ""

    def chats(ctx: TurnContext) -> list[Target]:
        here = [Target(ctx.channel, ctx.chat_id, ctx.thread_id)] if ctx.is_owner_private else []
        keys = (k.removeprefix(prefix) for k in owner_sessions if k.startswith(prefix))
        known = sorted(k.split(":") for k in keys if k.count(":") == 1)
        same = [Target(c, chat) for c, chat in known if c == ctx.channel]
        others = [Target(c, chat) for c, chat in known if c != ctx.channel]
        return [t for t in [*here, *same, *others] if reachable(t.channel)]

    return chats


class Approvals:
    def __init__(self, *, store: ApprovalStore, tools: ToolRegistry, bus: MessageBus, mode: str,
                 timeout_s: float, max_pending: int, owner_chats: OwnerChats,
                 clock: Callable[[], float] = time.time, agent: str = "") -> None:
        self.agent = agent  # the agent whose chats the outcome turns go to ("" the default)
        self.store = store
        self.tools = tools
        self.bus = bus
        self.mode = mode
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.owner_chats = owner_chats
        self.clock = clock
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

    # -- life ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.mode == "off":
            logger.warning("tools.approvals is OFF: owner-power actions (exec, owner-only writes, messages "
                           "to other chats, owner tasks, MCP tools) run even in turns that have read a "
                           "guest's or a web page's words. That is the owner's explicit choice.")
        interrupted = await asyncio.to_thread(self.store.load)
        for request in interrupted:
            logger.warning("approval %s: %s was running when the gateway stopped; not run again",
                           request.id, request.action())
        self._timer = asyncio.create_task(self._expire_loop(), name="approvals-expiry")

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None

    # -- holding ------------------------------------------------------------------------------
    def holds(self, ctx: TurnContext, taint: TurnTaint) -> bool:
        """Whether owner-power calls of this turn wait for the owner."""
        if self.mode == "off" or not ctx.is_owner:
            return False  # a guest's turn has no owner power to hold (the registry's rules)
        return self.mode == "always" or taint.tainted

    async def screen(self, ctx: TurnContext, name: str, arguments: str | dict[str, Any] | None,
                     taint: TurnTaint, *, turn: str | None = None) -> str | None:
        """None: run the call. Otherwise the text the model reads instead of a result."""
        if not self.holds(ctx, taint):
            return None
        prepared = self.tools.prepare(ctx, name, arguments)
        if isinstance(prepared, ToolOutput):
            return None  # not a valid call: the registry tells the model why
        tool, params = prepared
        power = getattr(tool, "owner_power", False)
        if callable(power):
            power = await asyncio.to_thread(power, ctx, params)
        if not power:
            return None
        async with self._lock:
            if len(self.store.pending(ctx.session_key)) >= self.max_pending:
                logger.warning("approval refused in %s: %d requests already pending", ctx.session_key,
                               self.max_pending)
                return (f"Error: not run — {self.max_pending} actions from this chat already wait for the "
                        "owner's approval; no more are asked until the owner answers those.")
            chats = self.owner_chats(ctx)
            if not chats:
                return ("Error: not run — this action needs the owner's approval, and no private chat "
                        "with the owner is known to ask in. The owner can message me privately once.")
            source = taint.first
            now = self.clock()
            request = ApprovalRequest.new(
                tool=name, arguments=canonical(arguments), session_key=ctx.session_key,
                channel=ctx.channel, chat_id=ctx.chat_id, chat_type=ctx.chat_type, thread_id=ctx.thread_id,
                sender_id=ctx.sender_id, turn=turn, created_at=now, expires_at=now + self.timeout_s,
                origin=source.origin if source else "tools.approvals is \"always\"",
                quote=source.quote if source else "",
                notified=[f"{t.channel}:{t.chat_id}" for t in chats[:1]])
            await asyncio.to_thread(self.store.add, request)
        self._changed.set()
        logger.info("approval %s: held %s from %s (%s)", request.id, request.tool, request.session_key,
                    request.origin)
        buttons = (("Approve once", f"/approve {request.id}"), ("Deny", f"/deny {request.id}"))
        await self.bus.publish_outbound(OutboundText(chats[0], owner_prompt(request, self.timeout_s, partial(command_text, chats[0].channel)), plain=True,
                                                     buttons=buttons))
        return held_note(request)

    # -- deciding -----------------------------------------------------------------------------
    async def approve(self, request_id: str, ctx: TurnContext) -> str:
        """Run the bound action once (the caller checked: the owner, in a private chat)."""
        request, refusal = await self._claim(request_id, ctx, "running")
        if request is None:
            return refusal
        logger.info("approval %s: approved by %s:%s; running %s once", request.id, ctx.channel,
                    ctx.sender_id, request.tool)
        output = await self.tools.execute(self._origin_ctx(request, ctx), request.tool, request.arguments)
        outcome = result_text(output)
        async with self._lock:
            await asyncio.to_thread(self.store.update, request, status="done", outcome=outcome)
        await self._tell_chat(request, f"The owner approved {request.action()}; it ran once. Result:\n{outcome}")
        verb = "failed" if output.failed else "ran once"
        return f"Approved: {request.action()} {verb}.\n{outcome}"

    async def deny(self, request_id: str, ctx: TurnContext) -> str:
        request, refusal = await self._claim(request_id, ctx, "denied")
        if request is None:
            return refusal
        logger.info("approval %s: denied by %s:%s", request.id, ctx.channel, ctx.sender_id)
        await self._tell_chat(request, f"The owner denied {request.action()}; it was not run.")
        return f"Denied: {request.action()} will not run."

    async def _claim(self, request_id: str, ctx: TurnContext,
                     status: str) -> tuple[ApprovalRequest | None, str]:
        """Move a pending request on, exactly once; or say why not."""
        if not ctx.is_owner_private:  # the commands check too; this is the boundary itself
            logger.warning("approval: refused an answer from %s:%s (%s, %s)", ctx.channel, ctx.sender_id,
                           ctx.role, ctx.chat_type)
            return None, "Only the owner, in a private chat with me, can answer approval requests."
        async with self._lock:
            request = self.store.find(request_id.strip())
            if request is None or request.status != "pending":
                logger.warning("approval: %s:%s answered an unknown or already decided id", ctx.channel,
                               ctx.sender_id)
                return None, "No pending approval request has that id (decided, expired or never made)."
            if self.clock() >= request.expires_at:
                expired = await asyncio.to_thread(self.store.update, request, status="expired",
                                                  decided_at=self.clock())
            elif not request.intact():
                logger.error("approval %s: the stored action no longer matches its digest; refused", request.id)
                await asyncio.to_thread(self.store.update, request, status="denied",
                                        outcome="refused: the action changed after it was held",
                                        decided_at=self.clock())
                return None, "Refused: that request's action changed after it was held; nothing was run."
            else:
                decided_by = f"{ctx.channel}:{ctx.sender_id}"
                return await asyncio.to_thread(self.store.update, request, status=status,
                                               decided_by=decided_by, decided_at=self.clock()), ""
        await self._expired(expired)
        return None, "That request had expired; it was not run."

    async def expire_due(self) -> None:
        """Deny every pending request past its deadline (and tell its chat)."""
        now = self.clock()
        async with self._lock:
            due = [r for r in self.store.pending() if r.expires_at <= now]
            expired = [await asyncio.to_thread(self.store.update, r, status="expired", decided_at=now)
                       for r in due]
        for request in expired:
            await self._expired(request)

    async def _expired(self, request: ApprovalRequest) -> None:
        logger.info("approval %s: expired unanswered; %s not run", request.id, request.tool)
        await self._tell_chat(request, f"Nobody approved {request.action()} in time; it was not run.")

    async def _expire_loop(self) -> None:
        while True:
            self._changed.clear()
            await self.expire_due()
            deadlines = [r.expires_at for r in self.store.pending()]
            wait = max(0.0, min(deadlines) - self.clock()) if deadlines else None
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                pass

    # -- the chat that asked ------------------------------------------------------------------
    def _origin_ctx(self, request: ApprovalRequest, approver: TurnContext) -> TurnContext:
        return TurnContext(session_key=request.session_key, channel=request.channel, chat_id=request.chat_id,
                           sender_id=request.sender_id, role="owner", chat_type=_chat_type(request.chat_type),
                           workspace=approver.workspace, thread_id=request.thread_id)

    async def _tell_chat(self, request: ApprovalRequest, outcome: str) -> None:
        """An internal turn in the chat that asked, so the model can tell the people there."""
        text = (f"[Approval {request.id} — a note from the gateway, not a person's words] {outcome}\n"
                "Tell the chat briefly what happened with the action you asked for.")
        msg = InboundMessage(channel=request.channel, chat_id=request.chat_id, sender_id=SENDER, text=text,
                             chat_type=_chat_type(request.chat_type),
                             thread_id=request.thread_id, silent=True, role="owner",
                             task=ScheduledTask(job=f"approval:{request.id}", role="owner", internal=True),
                             agent=self.agent)
        try:
            await self.bus.publish_inbound(msg, timeout=30)
        except (BusClosed, BusFull) as exc:
            logger.warning("approval %s: could not tell %s the outcome (%s)", request.id, request.session_key, exc)

    def recent(self, limit: int = 50) -> list[ApprovalRequest]:
        return self.store.recent(limit)

    def find(self, request_id: str) -> ApprovalRequest | None:
        return self.store.find(request_id)


def _chat_type(value: str) -> ChatType:
    """A stored chat type; anything unknown counts as shared, never as private."""
    for known in CHAT_TYPES:
        if value == known:
            return known
    return "group"
