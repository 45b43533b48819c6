"""The memory flush: one silent turn before the working set is compacted.

Compaction summarises the oldest part of a chat into one history line; details the owner
cares about can get lost in a summary. So when an owner's private session nears the point
where the consolidator starts trimming (a soft threshold at 7/8 of the working set), the
agent gets one turn of its own first: a short instruction to write anything durable from
the conversation into today's daily note (or MEMORY.md for lasting facts), answering
``NO_REPLY`` when there is nothing to keep.

Rules, each one deliberate:

- once per compaction cycle — after a flush, the next one waits until the consolidator
  has moved ``last_consolidated`` (the cycle's compaction happened);
- owner private chats only: guests and groups never write the owner's memory;
- not on the overflow path: the runner's forced consolidation (the prompt no longer fits)
  has no room for an extra turn, so it never flushes;
- silent: the turn's previews are not streamed and its answer is never sent; the
  instruction and the answer stay in the transcript (marked ``kind: memory_flush``) so a
  crash mid-flush resumes like any turn and the consolidator archives them with the rest.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from config.errors import LucidError
from gateway.tools.turn import TurnContext
from memory.sessions import Session, SessionStore
from memory.tokens import cached_message_bytes

logger = logging.getLogger(__name__)

NO_REPLY = "NO_REPLY"
FLUSH_KIND = "memory_flush"


class _Runner(Protocol):
    async def run(self, session: Session, ctx: TurnContext) -> object: ...


def flush_instruction(note_path: str) -> str:
    return (f"[memory flush — automatic, the user does not see this turn] The older part of this "
            f"conversation is about to be summarised into history. If it holds anything worth keeping "
            f"word for word — decisions, dates, names, preferences, open todos — append it now to "
            f"today's note {note_path} (or to memory/MEMORY.md if it is a lasting fact) with the file "
            f"tools. Do not repeat what those files already say. Then answer exactly {NO_REPLY}.")


class MemoryFlush:
    def __init__(self, runner: _Runner, sessions: SessionStore, *, conversation_tokens: Callable[[Session], int],
                 working_set: int | None, timezone: str) -> None:
        self.runner = runner
        self.sessions = sessions
        self.conversation_tokens = conversation_tokens
        self.threshold = working_set * 7 // 8 if working_set else None
        self.timezone = timezone
        self.count = 0  # flushes run since start (shown by /status)
        self._cycle: dict[str, int] = {}  # session -> last_consolidated when it last flushed

    def due(self, session: Session, ctx: TurnContext) -> bool:
        if self.threshold is None or not ctx.is_owner_private or ctx.silent:
            return False
        if self._cycle.get(session.key) == session.last_consolidated:
            return False  # already flushed in this cycle
        if sum(cached_message_bytes(m) for m in session.active()) < self.threshold:
            return False  # bytes bound tokens: most turns end here without counting
        return self.conversation_tokens(session) >= self.threshold

    async def run(self, session: Session, ctx: TurnContext) -> None:
        """The silent turn; failures are logged, never shown (the chat goes on regardless)."""
        self._cycle[session.key] = session.last_consolidated
        self.count += 1
        note = f"memory/{datetime.now(self._tz()).date().isoformat()}.md"
        await self.sessions.append(session, {"role": "user", "content": flush_instruction(note),
                                             "kind": FLUSH_KIND})
        silent = dataclasses.replace(ctx, silent=True)
        try:
            result = await self.runner.run(session, silent)
        except LucidError as exc:
            logger.warning("memory flush of %s failed: %s", session.key, exc)
            return
        text = getattr(result, "text", "")
        logger.info("memory flush of %s done (%s)", session.key,
                    "nothing to keep" if str(text).strip() == NO_REPLY else "notes written")

    def _tz(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except Exception:
            return ZoneInfo("UTC")
