"""The heartbeat: every ``heartbeat.intervalMin`` minutes, look at HEARTBEAT.md's tasks.

With no open tasks (no ``- `` bullet outside HTML comments, ``- [x]`` ones are done) a
beat is a file read and nothing else: zero LLM calls. With tasks, it publishes one silent
inbound message on the bus
(channel ``heartbeat``, chat ``main``), so the agent loop runs an ordinary turn in the small
``heartbeat:main`` session, never in the user's chat history (jobs publish to
the bus, they don't call the agent). The loop's answer comes back on the bus to channel
``heartbeat``, where ``on_reply`` drops ``NO_REPLY`` and forwards anything else to the
configured ``heartbeat.target`` chat.

The message carries a ``ScheduledTask`` (internal, role owner): the beat runs as the owner,
with the owner's tools and memory, so it can act on a task (read a file, set a reminder,
write a note), not only talk. Tokens are counted against ``heartbeat.tokenBudget`` per
(UTC) day, and a beat may spend at most what is left of it today.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol

from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.messages import (
    InboundMessage,
    ScheduledTask,
    OutboundMessage,
    OutboundProgress,
    OutboundText,
    OutboundTyping,
    Target,
)
from lucidgate.config.schema import HeartbeatConfig
from lucidgate.scheduler.state import JobState

logger = logging.getLogger(__name__)

CHANNEL = "heartbeat"
CHAT_ID = "main"
SESSION_KEY = f"{CHANNEL}:{CHAT_ID}"
NO_REPLY = "NO_REPLY"

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


class TokenLedger(Protocol):
    """What the heartbeat reads of the gateway's usage ledger (per-session totals)."""

    session_totals: Any

    def summarise(self, days: int = ...) -> Any: ...


_DONE = re.compile(r"^\[[xX]\]\s")


def heartbeat_tasks(text: str) -> list[str]:
    """The open ``- `` (or ``* ``) bullet lines of HEARTBEAT.md outside HTML comments.

    A checked box (``- [x] …``) is a finished task and costs nothing."""
    body = _COMMENT.sub("", text)
    body = body.split("<!--", 1)[0]  # an unclosed comment hides the rest, as it would when rendered
    tasks = []
    for line in body.splitlines():
        stripped = line.strip()
        item = stripped[2:].strip()
        if stripped.startswith(("- ", "* ")) and item and not _DONE.match(item + " "):
            tasks.append(item)
    return tasks


def _total(totals: Any) -> int:
    return int(getattr(totals, "total", 0) or 0)


class Heartbeat:
    def __init__(self, config: HeartbeatConfig, *, workspace: Path, bus: MessageBus,
                 usage: TokenLedger | None, tz: tzinfo, state: JobState, agent: str = "") -> None:
        self.config = config
        self.agent = agent  # whose turn a beat is ("" the default agent)
        self.path = workspace / "HEARTBEAT.md"
        self.bus = bus
        self.usage = usage
        self.tz = tz
        self.state = state
        self._day: date | None = None
        self._offset = 0  # tokens spent today before this process's counters started
        self._awaiting_since: float | None = None
        self._budget_warned: date | None = None

    @property
    def interval_s(self) -> float:
        return self.config.interval_min * 60

    def _read_tasks(self) -> list[str]:
        try:
            return heartbeat_tasks(self.path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            return []

    async def tokens_today(self) -> int:
        """Heartbeat tokens spent today (UTC), across restarts of the gateway."""
        if self.usage is None:
            return 0
        current = _total(self.usage.session_totals.get(SESSION_KEY))
        today = datetime.now(UTC).date()
        if self._day != today:
            summary = await asyncio.to_thread(self.usage.summarise, 1)
            on_file = _total(summary.by_session.get(SESSION_KEY))
            self._day, self._offset = today, max(0, on_file - current)
        return current + self._offset

    async def beat(self) -> str:
        """One heartbeat; returns a one-line outcome for ``lucid jobs``."""
        tasks = await asyncio.to_thread(self._read_tasks)
        if not tasks:
            return "idle: no tasks in HEARTBEAT.md"
        used = await self.tokens_today()
        if used >= self.config.token_budget:
            today = datetime.now(UTC).date()
            level = logging.WARNING if self._budget_warned != today else logging.INFO
            self._budget_warned = today
            logger.log(level, "heartbeat skipped: %d tokens used today, budget %d (heartbeat.tokenBudget)",
                       used, self.config.token_budget)
            return f"skipped: token budget spent ({used} of {self.config.token_budget} today)"
        if self._awaiting_since is not None:
            waited = time.monotonic() - self._awaiting_since
            if waited < max(self.interval_s, 600.0):
                logger.info("heartbeat skipped: the previous beat has not answered yet")
                return "skipped: previous beat still running"
            logger.warning("heartbeat: no answer to the previous beat after %.0f s; sending anew", waited)
        left = self.config.token_budget - used
        msg = InboundMessage(channel=CHANNEL, chat_id=CHAT_ID, sender_id=CHANNEL,
                             text=self._prompt(tasks), silent=True, role="owner",  # the gateway's own job
                             task=ScheduledTask(job="heartbeat", role="owner", token_budget=left,
                                                internal=True), agent=self.agent)
        try:
            await self.bus.publish_inbound(msg, timeout=30)
        except BusClosed:
            return "skipped: the gateway is shutting down"
        except BusFull:
            logger.warning("heartbeat: the assistant is busy; this beat is skipped, the next one will check")
            return "skipped: the assistant was busy"
        self._awaiting_since = time.monotonic()
        return f"checked {len(tasks)} task(s)"

    def _prompt(self, tasks: list[str]) -> str:
        now = datetime.now(self.tz).strftime("%Y-%m-%d %H:%M %Z")
        lines = "\n".join(f"- {t}" for t in tasks)
        return (f"[Heartbeat check, {now}]\nThe periodic tasks listed in HEARTBEAT.md:\n{lines}\n\n"
                "Decide whether any of them needs doing or saying right now; you may use your "
                "tools to check or to do it. If nothing needs the owner's attention, answer with "
                f"exactly {NO_REPLY} and nothing else. Otherwise answer only with the message "
                "for the owner; it is delivered to them as written.")

    async def on_reply(self, msg: OutboundMessage) -> None:
        """The bus handler for channel ``heartbeat``: the agent loop's answers to beats."""
        if isinstance(msg, (OutboundTyping, OutboundProgress)):
            return
        self._awaiting_since = None
        if msg.kind == "error":
            logger.warning("heartbeat turn failed: %s", msg.text)
            await self._record(f"turn failed: {msg.text[:200]}")
            return
        text = msg.text.strip()
        if not text or text.upper().startswith(NO_REPLY):
            logger.debug("heartbeat: nothing to do")
            await self._record("nothing due (NO_REPLY)")
            return
        target = self.config.target
        if target is None:
            logger.warning("heartbeat produced a message but heartbeat.target is not set; dropped "
                           "(%d chars). Set heartbeat.target {channel, chatId} to receive it.", len(text))
            await self._record("dropped: no heartbeat.target configured")
            return
        if not self.bus.has_route(target.channel):
            logger.warning("heartbeat target channel %r is not running; message dropped", target.channel)
            await self._record(f"dropped: channel {target.channel} not running")
            return
        await self.bus.publish_outbound(
            OutboundText(Target(target.channel, target.chat_id, target.thread_id), text))
        await self._record(f"sent to {target.channel}:{target.chat_id}")

    async def _record(self, outcome: str) -> None:
        await asyncio.to_thread(self.state.update, "heartbeat", last_reply=outcome,
                                last_reply_at=datetime.now(self.tz))
