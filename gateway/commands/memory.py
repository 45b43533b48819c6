"""The owner's memory commands: ``/memory``, ``/forget``, ``/dream``, ``/dream-log`` and
``/dream-restore``. All are owner-only and private-only: they reveal or change what the
assistant knows about its owner."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from lucidgate.gateway.agent.commands import About
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.dream import Dream
from lucidgate.memory.errors import DreamBusy, MemoryStoreError
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.store import MemoryStore

if TYPE_CHECKING:
    from lucidgate.memory.search.index import MemoryIndex
    from lucidgate.memory.sessions import SessionStore

CLIP_CHARS = 3500  # one chat message, below every platform's own limit: a protocol fact


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "\n…(truncated)"


class ShowMemory:
    """USER.md, MEMORY.md and the list of daily notes."""

    about: ClassVar[About] = About("memory", "what I know about you", owner_only=True, private_only=True)

    def __init__(self, store: MemoryStore, *, workspace: Path) -> None:
        self.store = store
        self.workspace = workspace

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        from lucidgate.memory.search.sources import daily_notes_summary

        user = await self.store.read_text("user")
        facts = await self.store.read_text("memory")
        notes = await asyncio.to_thread(daily_notes_summary, self.workspace)
        listed = f"\n\nDaily notes\n{notes}" if notes else ""
        return clip(f"USER.md\n{user.strip() or '(empty)'}\n\nMEMORY.md\n{facts.strip() or '(empty)'}"
                    + listed)


class Forget:
    """Forget a text everywhere memory holds it, for good (under Dream's lock, one commit)."""

    about: ClassVar[About] = About("forget", "remove lines from memory", owner_only=True, private_only=True,
                                   usage="[--confirm] <text>")

    def __init__(self, dream: Dream, store: MemoryStore, git: GitStore, *,
                 index: MemoryIndex | None = None, sessions: SessionStore | None = None) -> None:
        self.dream = dream
        self.store = store
        self.git = git
        self.index = index
        self.sessions = sessions

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        from lucidgate.memory.forget import ForgetNeedsConfirmation, describe, forget_exclusive

        text = args.strip()
        confirm = text.startswith("--confirm")
        text = text.removeprefix("--confirm").strip()
        if not text:
            return "Usage: /forget [--confirm] <text> — forgets that text everywhere memory holds it."
        try:
            report = await forget_exclusive(self.dream, self.store, self.git, text, index=self.index,
                                            sessions=self.sessions, confirm=confirm,
                                            by=f"/forget from {ctx.sender_id} in {ctx.session_key}")
        except DreamBusy:
            return "Dream is updating memory right now; try /forget again in a minute."
        except ForgetNeedsConfirmation as exc:
            return f"Not forgotten: {exc}. To go ahead: /forget --confirm {text}"
        return describe(report)


class DreamNow:
    about: ClassVar[About] = About("dream", "distil recent history into long-term memory now",
                                   owner_only=True, private_only=True)

    def __init__(self, dream: Dream) -> None:
        self.dream = dream

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        try:
            report = await self.dream.run()
        except DreamBusy:
            return "Dream is already running; try again in a minute."
        return report.summary()


class DreamLog:
    """The latest memory commits, or one commit's diff."""

    about: ClassVar[About] = About("dream-log", "list memory changes, or show one", owner_only=True,
                                   private_only=True, usage="[sha]")
    SHOWN = 15  # fits one chat message

    def __init__(self, git: GitStore) -> None:
        self.git = git

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        if args:
            try:
                return clip(await asyncio.to_thread(self.git.diff, args.split()[0]))
            except MemoryStoreError as exc:
                return str(exc)
        try:
            commits = await asyncio.to_thread(self.git.log, self.SHOWN)
        except MemoryStoreError as exc:
            return f"Cannot read the memory history: {exc}"
        if not commits:
            return "No memory changes yet."
        return "\n".join(f"{c.short} {c.when} {c.message}" for c in commits)


class DreamRestore:
    about: ClassVar[About] = About("dream-restore", "undo a memory change", owner_only=True,
                                   private_only=True, usage="<sha>")

    def __init__(self, git: GitStore) -> None:
        self.git = git

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        if not args:
            return "Usage: /dream-restore <sha> (see /dream-log)"
        try:
            sha = await asyncio.to_thread(self.git.restore, args.split()[0])
        except MemoryStoreError as exc:
            return str(exc)
        return f"Restored the memory files to before {args.split()[0]} (new commit {sha[:8]})."
