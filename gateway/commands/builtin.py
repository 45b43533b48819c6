"""The built-in slash commands, bound to the wired gateway parts (DESIGN §7)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from gateway.agent.commands import Command
from gateway.runtime import GatewayParts
from gateway.tools.turn import TurnContext
from memory.errors import MemoryStoreError
from memory.search.sources import daily_notes_summary
from memory.sessions import Session

logger = logging.getLogger(__name__)


def register_builtin_commands(gw: GatewayParts) -> None:
    add = gw.commands.add

    async def help_(ctx: TurnContext, args: str) -> str:
        return gw.commands.help_text(ctx)

    async def new(ctx: TurnContext, args: str) -> str:
        session = await gw.sessions.get(ctx.session_key)
        archived = len(session.messages) - session.last_consolidated
        earlier = session.last_consolidated > 0
        before = await asyncio.to_thread(gw.store.last_cursor)
        if archived:
            await gw.consolidator.archive_all(session)
        note = None
        if archived and ctx.is_owner_private and gw.config.agent.memory.session_notes:
            note = await _session_note(gw, session, before, earlier)
        await gw.sessions.reset(session)
        if not archived:
            return "Started a fresh conversation."
        kept = f" A note of it is in {note}." if note else ""
        return f"Started a fresh conversation; the previous {archived} message(s) went to memory.{kept}"

    async def status(ctx: TurnContext, args: str) -> str:
        session = await gw.sessions.get(ctx.session_key)
        ok, why = gw.model.configured()
        totals = gw.usage.session_totals.get(ctx.session_key)
        conversation = await asyncio.to_thread(gw.consolidator.conversation_tokens, session)
        lines = [
            f"model: {gw.config.agent.model} ({'ready' if ok else 'not configured: ' + why})",
            f"session: {ctx.session_key}, {len(session.messages)} messages "
            f"({len(session.active())} in context, {session.last_consolidated} archived)",
            f"prompt budget: {gw.config.agent.prompt_budget:,} tokens; working set "
            f"{conversation:,} of {gw.config.agent.working_set:,} tokens",
        ]
        if totals is not None:
            lines.append(f"tokens this session (since start): {totals.prompt:,} prompt, "
                         f"{totals.completion:,} completion, {totals.cached:,} cached")
        await gw.store.refresh()
        lines.append(f"memory: {gw.store.unprocessed_count()} history entries waiting for Dream"
                     + (" (Dream running)" if gw.dream.running else ""))
        if gw.agent.flush is not None:
            lines.append(f"memory flushes before compaction (since start): {gw.agent.flush.count}")
        lines.append(gw.scheduler.status_line())
        lines.append(await _cost_line(gw.usage.folder, ctx.session_key))
        if gw.mcp is not None and (mcp_line := gw.mcp.status_line()):
            lines.append(mcp_line)
        if gw.recall is not None:
            lines.append(await asyncio.to_thread(gw.recall.status_line))
        if (outbox := await gw.bus.outbox_counts()) is not None:
            lines.append(f"outbox: {outbox['pending']} pending, {outbox['dead']} dead-lettered")
        return "\n".join(lines)

    async def compact(ctx: TurnContext, args: str) -> str:
        session = await gw.sessions.get(ctx.session_key)
        before = session.last_consolidated
        rounds = 0
        # Everything but the latest exchange moves to history, chunk by chunk; the chat goes on.
        while rounds < MAX_COMPACT_ROUNDS and await gw.consolidator.force_round(session):
            rounds += 1
        moved = session.last_consolidated - before
        if not moved:
            return "Nothing to compact: only the latest exchange is in context."
        return (f"Compacted: {moved} message(s) summarised into memory; "
                f"{len(session.active())} remain in context.")

    async def context(ctx: TurnContext, args: str) -> str:
        from gateway.commands.status import context_report

        session = await gw.sessions.get(ctx.session_key)
        return await context_report(gw, session, ctx)

    async def dream(ctx: TurnContext, args: str) -> str:
        from memory.errors import DreamBusy

        try:
            report = await gw.dream.run()
        except DreamBusy:
            return "Dream is already running; try again in a minute."
        return report.summary()

    async def dream_log(ctx: TurnContext, args: str) -> str:
        if args:
            try:
                return _clip(await asyncio.to_thread(gw.git.diff, args.split()[0]))
            except MemoryStoreError as exc:
                return str(exc)
        try:
            commits = await asyncio.to_thread(gw.git.log, 15)
        except MemoryStoreError as exc:
            return f"Cannot read the memory history: {exc}"
        if not commits:
            return "No memory changes yet."
        return "\n".join(f"{c.short} {c.when} {c.message}" for c in commits)

    async def dream_restore(ctx: TurnContext, args: str) -> str:
        if not args:
            return "Usage: /dream-restore <sha> (see /dream-log)"
        try:
            sha = await asyncio.to_thread(gw.git.restore, args.split()[0])
        except MemoryStoreError as exc:
            return str(exc)
        return f"Restored the memory files to before {args.split()[0]} (new commit {sha[:8]})."

    async def memory(ctx: TurnContext, args: str) -> str:
        user = await gw.store.read_text("user")
        facts = await gw.store.read_text("memory")
        notes = await asyncio.to_thread(daily_notes_summary, gw.config.workspace)
        listed = f"\n\nDaily notes\n{notes}" if notes else ""
        return _clip(f"USER.md\n{user.strip() or '(empty)'}\n\nMEMORY.md\n{facts.strip() or '(empty)'}"
                     + listed)

    async def forget(ctx: TurnContext, args: str) -> str:
        from memory.errors import DreamBusy
        from memory.forget import describe, forget_exclusive

        if not args.strip():
            return "Usage: /forget <text> — removes memory lines containing that text."
        try:
            removed = await forget_exclusive(gw.dream, gw.store, gw.git, args.strip(),
                                             index=gw.recall.index if gw.recall else None)
        except DreamBusy:
            return "Dream is updating memory right now; try /forget again in a minute."
        return describe(removed, args)

    add(Command("help", "list commands", help_))
    add(Command("new", "archive this conversation to memory and start fresh", new))
    add(Command("stop", "stop the answer in progress", None))  # the agent loop, ahead of the queue
    add(Command("status", "model, session size, tokens, memory state", status))
    add(Command("compact", "summarise older messages into memory now and keep talking", compact))
    add(Command("context", "what the next prompt holds, in tokens per section", context))
    add(Command("dream", "distil recent history into long-term memory now", dream,
                owner_only=True, private_only=True))
    add(Command("dream-log", "list memory changes, or show one", dream_log, owner_only=True,
                private_only=True, usage="[sha]"))
    add(Command("dream-restore", "undo a memory change", dream_restore, owner_only=True,
                private_only=True, usage="<sha>"))
    add(Command("memory", "what I know about you", memory, owner_only=True, private_only=True))
    add(Command("forget", "remove lines from memory", forget, owner_only=True, private_only=True,
                usage="<text>"))


MAX_COMPACT_ROUNDS = 50


async def _session_note(gw: GatewayParts, session: Session, before: int, earlier: bool) -> str | None:
    """Write ``/new``'s note from the entries its archive just added; a failure is logged
    and never stops the fresh start."""
    from memory.session_note import first_user_text, note_text, write_session_note

    try:
        entries = [e for e in await gw.store.read_unprocessed(since=before)
                   if e.session_key == session.key]
        when = gw.store.now()
        text = note_text(key=session.key, when=when, messages=session.messages, entries=entries,
                         earlier=earlier)
        path = await asyncio.to_thread(write_session_note, gw.config.workspace, text, when=when,
                                       title_source=first_user_text(session.messages))
    except (OSError, MemoryStoreError):
        logger.exception("/new could not write the session note of %s", session.key)
        return None
    return path.relative_to(gw.config.workspace).as_posix()


async def _cost_line(folder: Path, session_key: str) -> str:
    from gateway.model.costs import daily_costs

    today = await asyncio.to_thread(daily_costs, folder, 1)
    mine = await asyncio.to_thread(daily_costs, folder, 1, session=session_key)
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


def _clip(text: str, limit: int = 3500) -> str:
    return text if len(text) <= limit else text[:limit] + "\n…(truncated)"
