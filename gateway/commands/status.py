"""``/context``: what the next prompt of this chat holds, in tokens per section.

The same builder and the same token counter as a real turn, so what it says is what the
model would be sent; it makes no LLM call.
"""

from __future__ import annotations

from gateway.runtime import GatewayParts
from gateway.tools.turn import TurnContext
from memory import tokens
from memory.sessions import Session


async def context_report(parts: GatewayParts, session: Session, ctx: TurnContext) -> str:
    builder = parts.builder
    await builder.refresh()
    rows: list[tuple[str, int]] = []
    for label, text in builder.stable_sections(ctx):
        rows.append((label, tokens.count_text(text)))
    memory = builder.memory_section(ctx)
    rows.append(("memory (USER.md, MEMORY.md)", tokens.count_text(memory) if memory else 0))
    history = await builder.history_section(ctx)
    rows.append(("recent history", tokens.count_text(history) if history else 0))
    schemas = parts.tools.schemas(ctx)
    rows.append((f"tools ({len(schemas)})", tokens.count_tools(schemas) if schemas else 0))
    active = session.active()
    rows.append((f"messages ({len(active)} in context, {session.last_consolidated} archived)",
                 sum(tokens.count_message(m) for m in active)))
    total = sum(n for _, n in rows)
    budget = parts.config.agent.prompt_budget
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {n:>7,}" for label, n in rows]
    lines.append(f"{'total'.ljust(width)}  {total:>7,} of {budget:,} tokens ({100 * total // max(budget, 1)}%)")
    lines.append(f"working set: the conversation is kept under {parts.config.agent.working_set:,} tokens; "
                 "older turns move to history (memory_search finds them)")
    return "Next prompt, in tokens:\n" + "\n".join(lines)
