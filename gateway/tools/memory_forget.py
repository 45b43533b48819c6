"""``memory_forget`` and ``memory_list``: the owner's "forget …" and "what do you know about …"
said to the model instead of typed as a command.

``memory_forget`` is ``/forget`` as a tool: the same removal (MEMORY.md, USER.md, history
and its archive, the recall index), under Dream's lock, committed as ``forget: <text>
(memory_forget in <session>)`` and logged — the audit trail names the tool and the chat.
Owner only and private chats only, like the command; the text must be at least three
characters, since a model's one-letter call would empty the files. ``memory_list`` shows the
lines memory holds about a text, without reading whole files and without changing anything:
what a forget of that text would match, so the model can show the owner before removing.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.base import ToolParams
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.dream import Dream
from lucidgate.memory.errors import DreamBusy
from lucidgate.memory.forget import describe, forget_exclusive, mentions
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.search.index import MemoryIndex
from lucidgate.memory.store import MemoryStore

__all__ = ["MemoryForget", "MemoryList"]

MIN_TEXT = 3


def _private_owner(ctx: TurnContext) -> None:
    if not ctx.is_owner_private:
        raise ToolError("memory can only be changed or listed in the owner's private chat")


class MemoryForget:
    name = "memory_forget"
    description = "Remove every memory line containing text, when the owner asks you to forget it."
    owner_only = True

    class Params(ToolParams):
        text: str = Field(min_length=MIN_TEXT, max_length=200)

    def __init__(self, store: MemoryStore, git: GitStore, dream: Dream,
                 index: MemoryIndex | None = None) -> None:
        self.store, self.git, self.dream, self.index = store, git, dream, index

    async def run(self, ctx: TurnContext, params: MemoryForget.Params) -> str:
        _private_owner(ctx)
        text = params.text.strip()
        if len(text) < MIN_TEXT:
            raise ToolError(f"say what to forget in at least {MIN_TEXT} characters")
        try:
            removed = await forget_exclusive(self.dream, self.store, self.git, text, index=self.index,
                                             by=f"memory_forget in {ctx.session_key}")
        except DreamBusy:
            raise ToolError("Dream is updating memory right now; try again in a minute") from None
        return describe(removed, text)


class MemoryList:
    name = "memory_list"
    description = "The memory lines (files, notes, history) that mention text."
    owner_only = True

    class Params(ToolParams):
        text: str = Field(min_length=1, max_length=200)

    async def run(self, ctx: TurnContext, params: MemoryList.Params) -> str:
        _private_owner(ctx)
        if not params.text.strip():
            raise ToolError("say what to look for")
        found = await asyncio.to_thread(mentions, ctx.workspace, params.text)
        if not found:
            return f"Nothing in memory mentions {params.text.strip()!r}."
        if any(line.startswith("memory/20") for line in found):
            found.append("(memory_forget leaves notes memory/<date>*.md alone; edit_file changes them)")
        return "\n".join(found)
