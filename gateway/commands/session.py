"""The conversation's own commands: ``/help``, ``/stop``, ``/new`` and ``/compact``.

``/new`` and ``/compact`` move messages into memory through the consolidator, which calls
the model to summarise; they are still commands because the chat's own turn never runs.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import ClassVar

from lucidgate.gateway.agent.commands import About, CommandRegistry
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.errors import MemoryStoreError
from lucidgate.memory.sessions import Session, SessionStore
from lucidgate.memory.speakers import is_shared, speakers_of
from lucidgate.memory.store import MemoryStore

logger = logging.getLogger(__name__)

# Listed only: the agent loop handles /stop ahead of the session's queue, since it must reach
# a turn that is already running.
STOP = About("stop", "stop the answer in progress (in a shared chat: your own)")
MAX_COMPACT_ROUNDS = 50  # a bound on one command's work, not a setting: each round is one chunk


class Help:
    about: ClassVar[About] = About("help", "list commands")

    def __init__(self, commands: CommandRegistry) -> None:
        self.commands = commands

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        return self.commands.help_text(ctx)


class New:
    """Archive the whole conversation to memory and start an empty one; in the owner's
    private chat, also leave a session note (``agents.defaults.memory.sessionNotes``), and in
    a shared chat a note filed as that chat's guest material."""

    about: ClassVar[About] = About("new", "archive this conversation to memory and start fresh",
                                   owner_when_shared=True)

    def __init__(self, sessions: SessionStore, store: MemoryStore, consolidator: Consolidator, *,
                 workspace: Path, session_notes: bool) -> None:
        self.sessions = sessions
        self.store = store
        self.consolidator = consolidator
        self.workspace = workspace
        self.session_notes = session_notes

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        session = await self.sessions.get(ctx.session_key)
        archived = len(session.messages) - session.last_consolidated
        earlier = session.last_consolidated > 0
        before = await asyncio.to_thread(self.store.last_cursor)
        if archived:
            await self.consolidator.archive_all(session)
        note = None
        if archived and self.session_notes and (ctx.is_owner_private or is_shared(ctx.chat_type)):
            note = await self._note(session, before, earlier, shared=not ctx.is_owner_private)
        await self.sessions.reset(session)
        if not archived:
            return "Started a fresh conversation."
        kept = f" A note of it is in {note}." if note else ""
        return f"Started a fresh conversation; the previous {archived} message(s) went to memory.{kept}"

    async def _note(self, session: Session, before: int, earlier: bool, *, shared: bool) -> str | None:
        """The note from the entries the archive just added; a failure is logged and never
        stops the fresh start. A shared chat's note is filed as that chat's guest material,
        named after the chat (``memory.session_note``)."""
        from lucidgate.memory import session_note as notes

        try:
            messages = await self.sessions.transcript(session)  # archived now: read back from the file
            entries = [e for e in await self.store.read_unprocessed(since=before)
                       if e.session_key == session.key]
            when = self.store.now()
            if shared:
                text = notes.shared_note_text(key=session.key, when=when, entries=entries, earlier=earlier,
                                              speakers=speakers_of(messages))
                path = await asyncio.to_thread(notes.write_shared_note, self.workspace, text, when=when,
                                               session_key=session.key)
            else:
                text = notes.note_text(key=session.key, when=when, messages=messages,
                                       entries=entries, earlier=earlier)
                path = await asyncio.to_thread(notes.write_session_note, self.workspace, text, when=when,
                                               title_source=notes.first_user_text(messages))
        except (OSError, MemoryStoreError):
            logger.exception("/new could not write the session note of %s", session.key)
            return None
        return path.relative_to(self.workspace).as_posix()


class Compact:
    """Summarise everything but the latest exchange into history, chunk by chunk; the chat goes on."""

    about: ClassVar[About] = About("compact", "summarise older messages into memory now and keep talking",
                                   owner_when_shared=True)

    def __init__(self, sessions: SessionStore, consolidator: Consolidator) -> None:
        self.sessions = sessions
        self.consolidator = consolidator

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        session = await self.sessions.get(ctx.session_key)
        before = session.last_consolidated
        rounds = 0
        while rounds < MAX_COMPACT_ROUNDS and await self.consolidator.force_round(session):
            rounds += 1
        moved = session.last_consolidated - before
        if not moved:
            return "Nothing to compact: only the latest exchange is in context."
        return (f"Compacted: {moved} message(s) summarised into memory; "
                f"{len(session.active())} remain in context.")
