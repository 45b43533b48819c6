"""``/model``: list the configured model presets and pin this session to one (owner only).

Presets are ``agents.defaults.modelPresets`` (name -> litellm model string); the choice is
per session and survives restarts (``state/models.json``). ``/model default`` unpins. The
fallback models still follow whichever model the session uses.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from lucidgate.gateway.agent.commands import About
from lucidgate.gateway.model.fallback import ModelChain
from lucidgate.gateway.tools.turn import TurnContext


class SwitchModel:
    """``/model [preset|default]``: show the session's models, or pin or unpin a preset."""

    about: ClassVar[About] = About("model", "list model presets, or switch this conversation to one",
                                   owner_only=True, usage="[preset|default]")

    def __init__(self, chain: ModelChain) -> None:
        self.chain = chain

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        chain = self.chain
        presets = chain.presets
        choice = args.strip()
        if not choice:
            return describe(chain, ctx.session_key)
        if chain.sessions is None:
            return "Model switching is not available here."
        if choice in ("default", "reset"):
            await asyncio.to_thread(chain.sessions.set, ctx.session_key, None)
            return f"This conversation uses the default model again ({chain.models_for(ctx.session_key)[0]})."
        if choice not in presets:
            known = ", ".join(sorted(presets)) or "none configured (agents.defaults.modelPresets)"
            return f"There is no preset {choice!r}. Presets: {known}."
        await asyncio.to_thread(chain.sessions.set, ctx.session_key, choice)
        return f"This conversation now uses {choice} ({presets[choice]})."


def describe(chain: ModelChain, session_key: str) -> str:
    models = chain.models_for(session_key)
    pinned = chain.sessions.get(session_key) if chain.sessions is not None else None
    lines = [f"model: {models[0]}" + (f" (preset {pinned})" if pinned else " (default)")]
    if len(models) > 1:
        lines.append("fallbacks: " + " → ".join(models[1:]))
    if chain.presets:
        lines.append("presets: " + ", ".join(f"{n} = {m}" for n, m in sorted(chain.presets.items())))
        lines.append("switch with /model <preset>, back with /model default")
    else:
        lines.append("no presets configured (agents.defaults.modelPresets)")
    return "\n".join(lines)
