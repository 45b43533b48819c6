"""``memory_forget`` and ``memory_list``: the owner's "forget …" and "what do you know about …"
said to the model instead of typed as a command.

``memory_forget`` is ``/forget`` as a tool: the same forget (every place memory holds the
text, see ``memory.forget``), under Dream's lock, committed and logged as asked by
``memory_forget in <session>`` — the audit trail names the tool and the chat. Owner only
and private chats only, like the command; the text must be at least three characters, and a
short text or one matching a large share of memory needs ``confirm`` (after showing the owner
what ``memory_list`` finds). ``memory_list`` shows the lines memory holds about a text,
without reading whole files and without changing anything.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.base import ToolParams
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.dream import Dream
from lucidgate.memory.errors import DreamBusy
from lucidgate.memory.forget import ForgetNeedsConfirmation, describe, forget_exclusive, mentions
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.search.index import MemoryIndex
from lucidgate.memory.sessions import SessionStore
from lucidgate.memory.store import MemoryStore

__all__ = ["MemoryForget", "MemoryList"]

MIN_TEXT = 3


def _private_owner(ctx: TurnContext) -> None:
    if not ctx.is_owner_private:
        raise ToolError("memory can only be changed or listed in the owner's private chat")


class MemoryForget:
    name = "memory_forget"
    description = ("Forget text everywhere memory holds it (files, notes, history, conversations, "
                   "recall), for good, when the owner asks you to forget it.")
    owner_only = True

    class Params(ToolParams):
        text: str = Field(min_length=MIN_TEXT, max_length=200)
        confirm: bool = Field(False, description="true only after the owner confirmed a forget "
                                                 "the first call said needs confirmation")

    def __init__(self, store: MemoryStore, git: GitStore, dream: Dream,
                 index: MemoryIndex | None = None, sessions: SessionStore | None = None) -> None:
        self.store, self.git, self.dream, self.index = store, git, dream, index
        self.sessions = sessions

    async def run(self, ctx: TurnContext, params: MemoryForget.Params) -> str:
        _private_owner(ctx)
        text = params.text.strip()
        if len(text) < MIN_TEXT:
            raise ToolError(f"say what to forget in at least {MIN_TEXT} characters")
        try:
            report = await forget_exclusive(self.dream, self.store, self.git, text, index=self.index,
                                            sessions=self.sessions, confirm=params.confirm,
                                            by=f"memory_forget in {ctx.session_key}")
        except DreamBusy:
            raise ToolError("Dream is updating memory right now; try again in a minute") from None
        except ForgetNeedsConfirmation as exc:
            raise ToolError(f"not forgotten: {exc} (ask the owner, then call again with confirm)") from None
        return describe(report)


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
        return "\n".join(found)
