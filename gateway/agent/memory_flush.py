"""The memory flush: one silent turn before the working set is compacted.

Compaction summarises the oldest part of a chat into one history line; details the owner
cares about can get lost in a summary. So when an owner's private session nears the point
where the consolidator starts trimming (``memory.flushSoftThresholdTokens`` below the working
set; an eighth of it by default), the agent gets one turn of its own first: a short
instruction (or the owner's ``memory.flushInstruction``, framed by the built-in line or
``memory.flushFraming``) to write anything durable from the
conversation into today's daily note (or MEMORY.md for lasting facts), answering
``NO_REPLY`` when there is nothing to keep. ``memory.flushTranscriptBytes`` adds a second
trigger: that many transcript bytes since the last flush, for chats whose bulk (long tool
output) is trimmed out of the token count.

Rules, each one deliberate:

- once per compaction cycle — after a token-triggered flush, the next one waits until the
  consolidator has moved ``last_consolidated`` (the cycle's compaction happened); the size
  trigger counts from the last flush line in the transcript, so it cannot repeat either;
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

from lucidgate.config.errors import LucidError
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.sessions import Session, SessionStore
from lucidgate.memory import tokens
from lucidgate.memory.tokens import cached_message_bytes

logger = logging.getLogger(__name__)

NO_REPLY = "NO_REPLY"
FLUSH_KIND = "memory_flush"


class _Runner(Protocol):
    async def run(self, session: Session, ctx: TurnContext) -> object: ...


FRAMING = "[memory flush — automatic, the user does not see this turn]"


def flush_instruction(note_path: str, custom: str | None = None, framing: str | None = None) -> str:
    header = framing.strip() if framing and framing.strip() else FRAMING
    if custom:
        return f"{header} {custom.strip()} Today's note: {note_path}. Then answer exactly {NO_REPLY}."
    return (f"{header} The older part of this "
            f"conversation is about to be summarised into history. If it holds anything worth keeping "
            f"word for word — decisions, dates, names, preferences, open todos — append it now to "
            f"today's note {note_path} (or to memory/MEMORY.md if it is a lasting fact) with the file "
            f"tools. Do not repeat what those files already say. Then answer exactly {NO_REPLY}.")


def flush_threshold(working_set: int, soft_threshold_tokens: int | None) -> int:
    """Conversation tokens at which the flush runs: ``soft`` below the working set (an eighth
    of it when unset), never below a quarter of it, so a large soft value cannot make every
    turn of a short chat a flush."""
    soft = working_set // 8 if soft_threshold_tokens is None else soft_threshold_tokens
    return max(working_set - soft, working_set // 4)


class MemoryFlush:
    def __init__(self, runner: _Runner, sessions: SessionStore, *, conversation_tokens: Callable[[Session], int],
                 working_set: int | None, timezone: str, soft_threshold_tokens: int | None = None,
                 transcript_bytes: int | None = None, instruction: str | None = None,
                 framing: str | None = None) -> None:
        self.runner = runner
        self.sessions = sessions
        self.conversation_tokens = conversation_tokens
        self.threshold = flush_threshold(working_set, soft_threshold_tokens) if working_set else None
        self.transcript_bytes = transcript_bytes if working_set else None
        self.instruction = instruction
        self.framing = framing
        self.timezone = timezone
        self.count = 0  # flushes run since start (shown by /status)
        self._cycle: dict[str, int] = {}  # session -> last_consolidated when it last flushed

    def due(self, session: Session, ctx: TurnContext) -> bool:
        """Whether the flush may be due, without loading the tokenizer on the event loop: where
        it is not loaded (a short-lived process) and the bytes do not settle it, True here,
        and ``run`` counts exactly (the tokenizer loaded in a thread) before it flushes."""
        return self._due(session, ctx, exact=tokens.loaded())

    def _due(self, session: Session, ctx: TurnContext, *, exact: bool) -> bool:
        if self.threshold is None or not ctx.is_owner_private or ctx.silent:
            return False
        if self.transcript_bytes is not None and _bytes_since_flush(session, self.transcript_bytes) >= self.transcript_bytes:
            return True
        if self._cycle.get(session.key) == session.last_consolidated:
            return False  # already flushed in this cycle
        if sum(cached_message_bytes(m) for m in session.active()) < self.threshold:
            return False  # bytes bound tokens: most turns end here without counting
        return self.conversation_tokens(session) >= self.threshold if exact else True

    async def run(self, session: Session, ctx: TurnContext) -> None:
        """The silent turn, if ``due`` holds by an exact count; failures are logged, never
        shown (the chat goes on regardless)."""
        if not tokens.loaded():
            await tokens.ready()
            if not self._due(session, ctx, exact=True):
                return
        self._cycle[session.key] = session.last_consolidated
        self.count += 1
        note = f"memory/{datetime.now(self._tz()).date().isoformat()}.md"
        await self.sessions.append(session, {"role": "user", "content": flush_instruction(note, self.instruction, self.framing),
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


def _bytes_since_flush(session: Session, enough: int) -> int:
    """Transcript bytes after the latest flush instruction, counted back only until ``enough``
    and never into what left the context (a turn's cost must not grow with the transcript's
    length; the archived prefix is not held in memory)."""
    total = 0
    for message in reversed(session.messages[session.released:]):
        if message.get("kind") == FLUSH_KIND or total >= enough:
            break
        total += cached_message_bytes(message)
    return total
