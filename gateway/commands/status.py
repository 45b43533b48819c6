"""``/status`` and ``/context``: what this chat and the gateway look like right now.

Neither makes a model call. ``/context`` uses the same builder and token counter as a real
turn, so what it says is what the model would be sent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from lucidgate.config.schema import AgentDefaults
from lucidgate.gateway.agent.commands import About
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory import tokens
from lucidgate.memory.sessions import SessionStore

if TYPE_CHECKING:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.gateway.agent.context import ContextBuilder
    from lucidgate.gateway.agent.memory_flush import MemoryFlush
    from lucidgate.gateway.mcp import McpManager
    from lucidgate.gateway.model.client import LiteLLMChatModel
    from lucidgate.gateway.model.usage import UsageLedger
    from lucidgate.gateway.tools.base import ToolRegistry
    from lucidgate.memory.consolidator import Consolidator
    from lucidgate.memory.dream import Dream
    from lucidgate.memory.search.service import RecallService
    from lucidgate.memory.store import MemoryStore
    from lucidgate.scheduler import SchedulerService


class Status:
    """One line per part a user may wonder about: model, session size, tokens, memory, jobs,
    cost, MCP, recall and the outbox."""

    about: ClassVar[About] = About("status", "model, session size, tokens, memory state")

    def __init__(self, agent: AgentDefaults, *, sessions: SessionStore, model: LiteLLMChatModel,
                 usage: UsageLedger, consolidator: Consolidator, store: MemoryStore, dream: Dream,
                 scheduler: SchedulerService, bus: MessageBus, flush: MemoryFlush | None = None,
                 mcp: McpManager | None = None, recall: RecallService | None = None) -> None:
        self.agent = agent
        self.sessions = sessions
        self.model = model
        self.usage = usage
        self.consolidator = consolidator
        self.store = store
        self.dream = dream
        self.scheduler = scheduler
        self.bus = bus
        self.flush = flush
        self.mcp = mcp
        self.recall = recall

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        session = await self.sessions.get(ctx.session_key)
        ok, why = self.model.configured()
        totals = self.usage.session_totals.get(ctx.session_key)
        conversation = await asyncio.to_thread(self.consolidator.conversation_tokens, session)
        agent = self.agent
        lines = [
            f"model: {agent.model} ({'ready' if ok else 'not configured: ' + why})",
            f"session: {ctx.session_key}, {len(session.messages)} messages "
            f"({len(session.active())} in context, {session.last_consolidated} archived)",
            f"prompt budget: {agent.prompt_budget:,} tokens; working set "
            f"{conversation:,} of {agent.working_set:,} tokens",
        ]
        if totals is not None:
            lines.append(f"tokens this session (since start): {totals.prompt:,} prompt, "
                         f"{totals.completion:,} completion, {totals.cached:,} cached")
        await self.store.refresh()
        lines.append(f"memory: {self.store.unprocessed_count()} history entries waiting for Dream"
                     + (" (Dream running)" if self.dream.running else ""))
        if self.flush is not None:
            lines.append(f"memory flushes before compaction (since start): {self.flush.count}")
        lines.append(self.scheduler.status_line())
        lines.append(await cost_line(self.usage.folder, ctx.session_key))
        if self.mcp is not None and (mcp_line := self.mcp.status_line()):
            lines.append(mcp_line)
        if self.recall is not None:
            lines.append(await asyncio.to_thread(self.recall.status_line))
        if (outbox := await self.bus.outbox_counts()) is not None:
            lines.append(f"outbox: {outbox['pending']} pending, {outbox['dead']} dead-lettered")
        return "\n".join(lines)


async def cost_line(folder: Path, session_key: str) -> str:
    """Today's cost, and this conversation's share, from the usage journal in ``folder``."""
    from lucidgate.gateway.model.costs import costs_by_day
    from lucidgate.gateway.model.usage_journal import read_journal

    entries = await asyncio.to_thread(read_journal, folder, 1)  # one read: the share fits the total
    today = costs_by_day(entries)
    mine = costs_by_day(entries, session=session_key)
    total = next(iter(today.values()), None)
    session = next(iter(mine.values()), None)
    if total is None:
        return "cost today: $0 (no model calls yet)"
    line = f"cost today: {total.describe()}"
    if session is not None:
        line += f"; this conversation today {session.describe()}"
        if session.per_turn is not None:
            line += f", about ${session.per_turn:.4f} a turn"
    return line


class Context:
    """What the next prompt of this chat holds, in tokens per section."""

    about: ClassVar[About] = About("context", "what the next prompt holds, in tokens per section")

    def __init__(self, agent: AgentDefaults, *, sessions: SessionStore, builder: ContextBuilder,
                 tools: ToolRegistry) -> None:
        self.agent = agent
        self.sessions = sessions
        self.builder = builder
        self.tools = tools

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        session = await self.sessions.get(ctx.session_key)
        builder = self.builder
        await builder.refresh()
        await tokens.ready()  # a short-lived process loads the tokenizer only now, off the loop
        rows: list[tuple[str, int]] = []
        for label, text in builder.stable_sections(ctx):
            rows.append((label, tokens.count_text(text)))
        memory = builder.memory_section(ctx)
        rows.append(("memory (USER.md, MEMORY.md)", tokens.count_text(memory) if memory else 0))
        history = await builder.history_section(ctx)
        rows.append(("recent history", tokens.count_text(history) if history else 0))
        schemas = self.tools.schemas(ctx)
        rows.append((f"tools ({len(schemas)})", tokens.count_tools(schemas) if schemas else 0))
        active = session.active()
        rows.append((f"messages ({len(active)} in context, {session.last_consolidated} archived)",
                     sum(tokens.count_message(m) for m in active)))
        total = sum(n for _, n in rows)
        budget = self.agent.prompt_budget
        width = max(len(label) for label, _ in rows)
        lines = [f"{label.ljust(width)}  {n:>7,}" for label, n in rows]
        lines.append(f"{'total'.ljust(width)}  {total:>7,} of {budget:,} tokens "
                     f"({100 * total // max(budget, 1)}%)")
        lines.append(f"working set: the conversation is kept under {self.agent.working_set:,} tokens; "
                     "older turns move to history (memory_search finds them)")
        return "Next prompt, in tokens:\n" + "\n".join(lines)
