"""Token-budget consolidation: move old session messages into history.jsonl (DESIGN §5.2).

When the prompt a session would send reaches ``budget``, the oldest active messages are
summarised by the LLM into one history entry and ``last_consolidated`` moves past them,
in up to ``max_rounds`` chunks until the estimate is back under ``target = budget // 2``
(halving leaves room for many turns before the next consolidation).

Ordering is what makes this crash-safe: the history entry is appended *before* the session
header moves. A crash in between can at worst archive a chunk twice, never lose it.

Concurrency: one consolidation per session at a time, in arrival order — each session has a
queue of consolidation work on the keyed-worker primitive (``config/keyed.py``), whose state
lives and dies with that queue. A background check (``schedule()``, after a turn) is an item
of it; a ``schedule()`` while a check waits in the queue adds nothing, and while one runs
queues exactly one re-check. A caller that consolidates in place (before a turn, ``/new``,
an overflow) queues a ``_Turn`` and works in its own task once the worker grants it, so the
work keeps the caller's context (the turn's role and budget) and is cancelled with it. The
SessionStore's lock guards single writes and is taken inside ``set_last_consolidated``.
Turns keep appending while a background round runs: a round works on a snapshot that ends
before the newest user message, so indices it archives never move.

Provenance: every history entry records where its chunk came from (channel, chat type,
and whether it is the owner's), computed by ``provenance`` — the composition root knows
who the owners are; memory does not. Dream lets only owner-private entries change the
long-term files (``memory/dream.py``). Without a ``provenance`` callable the channel and
chat type come from the session's origin and ``owner`` stays unrecorded. A shared chat's chunk
goes to the summariser with each line's speaker (``memory.speakers``), and its entry records
the ``speakers``, so the summary never turns a guest's words into the owner's.

Events for metrics (``on_event``): ``"archived"`` per chunk summarised by the LLM
(including a "(nothing)" answer), ``"raw_fallback"`` per chunk archived as ``[RAW]``,
``"noop"`` per check that archived nothing. A "(nothing)" answer appends no history entry
(there is nothing for Dream to read) but still advances ``last_consolidated``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from lucidgate.config.errors import LucidError
from lucidgate.config.keyed import KeyedWorkers
from lucidgate.memory._boundaries import find_cut, protected_start
from lucidgate.memory.consolidation_prompt import (
    build_request,
    parse_summary,
    prompt_overhead_tokens,
    raw_entry,
)
from lucidgate.memory._history_index import Provenance
from lucidgate.memory.errors import PromptTooLong
from lucidgate.memory.protocols import ChatModel, PromptSizer
from lucidgate.memory.sessions import Session, SessionStore
from lucidgate.memory.speakers import is_shared, labelled, speakers_of
from lucidgate.memory import tokens
from lucidgate.memory.tokens import cached_message_bytes, cached_message_tokens

if TYPE_CHECKING:
    from lucidgate.memory.store import MemoryStore

logger = logging.getLogger(__name__)

Estimator = PromptSizer  # kept for callers that name the type
ProvenanceOf = Callable[[Session, list[dict[str, Any]]], Provenance]
MIN_CHUNK_TOKENS = 256  # halving a refused chunk stops here; below it the chunk goes raw


def default_chunk_tokens(budget: int, requested: int | None = None) -> int:
    """Largest chunk whose summarisation request still fits in ``budget``."""
    ceiling = max(budget - prompt_overhead_tokens(), 1)
    wanted = budget // 2 if requested is None else requested
    return max(min(wanted, ceiling), 1)


@dataclass(slots=True)
class _Turn:
    """A caller's place in a session's consolidation queue: ``granted`` when its turn comes,
    ``released`` when it is done (or gave up waiting)."""

    granted: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)


CHECK: Literal["check"] = "check"  # the queue item of a background check


@dataclass(slots=True)
class _Queue:
    """A session's state while it has consolidation work: whether a check waits unstarted,
    and whether the summary call of the round in hand failed."""

    check_waiting: bool = False
    summary_failed: bool = False


def origin_provenance(session: Session, chunk: list[dict[str, Any]]) -> Provenance:
    """Channel and chat type from the session's origin; the owner question left open."""
    origin = session.metadata.get("origin") or {}
    channel, chat_type = origin.get("channel"), origin.get("chat_type")
    return Provenance(channel=channel if isinstance(channel, str) else None,
                      chat_type=chat_type if isinstance(chat_type, str) else None)


class Consolidator:
    def __init__(
        self,
        sessions: SessionStore,
        store: MemoryStore,
        model: ChatModel,
        *,
        estimate: PromptSizer,
        budget: int,
        chunk_tokens: int | None = None,
        max_rounds: int = 5,
        on_event: Callable[[str], None] | None = None,
        answer_tokens: int | None = None,
        working_set: int | None = None,
        provenance: ProvenanceOf | None = None,
    ) -> None:
        if budget <= 0:
            raise ValueError(f"consolidation budget must be positive, got {budget}")
        self._sessions = sessions
        self._store = store
        self._model = model
        self._estimate = estimate
        self.budget = budget
        self.target = budget // 2
        self._budget_for_chunks = budget
        self._requested_chunk_tokens = chunk_tokens
        self._chunk_tokens: int | None = None
        self.max_rounds = max(max_rounds, 1)
        self._on_event = on_event
        # The summary's answer budget: None lets the model use agents.defaults.maxCompletionTokens,
        # which the prompt budget (and so every chunk) already leaves room for.
        self._answer_tokens = answer_tokens
        # After a turn, the conversation (not the whole prompt) is brought back under the
        # working set; to 3/4 of it, so consolidation runs every few turns, not every turn.
        self.working_set = working_set
        self.working_set_low = working_set * 3 // 4 if working_set is not None else None
        self._provenance = provenance or origin_provenance
        # One worker per session with work, gone as soon as its queue is empty (idle_s=0).
        self._work: KeyedWorkers[_Turn | Literal["check"], _Queue] = KeyedWorkers(
            "consolidate", self._handle, idle_s=0, new_state=lambda _key: _Queue())

    # -- public entry points ---------------------------------------------------------------
    @property
    def chunk_tokens(self) -> int:
        """Computed on first use: counting the summary prompt loads tiktoken (~0.5 s), which a
        one-shot ``lucid agent -m`` that never consolidates should not pay at start-up."""
        if self._chunk_tokens is None:
            self._chunk_tokens = default_chunk_tokens(self._budget_for_chunks, self._requested_chunk_tokens)
        return self._chunk_tokens

    async def before_turn(self, session: Session) -> None:
        """Pre-turn check: only works (and only waits) when the session is over budget.

        A failing memory store is logged, not raised: the turn can still be answered,
        and the overflow path forces consolidation if the prompt really does not fit.
        """
        if await self._estimate(session) < self.budget:
            self._emit("noop")
            return
        try:
            async with self._hold(session.key):
                await self._run(session, fail_fast=True)
        except (LucidError, OSError):
            logger.exception("pre-turn consolidation of %s failed; answering anyway", session.key)

    def schedule(self, session_key: str) -> None:
        """Check ``session_key`` in the background (call after every turn)."""
        queue = self._work.state(session_key)
        if queue is not None and queue.check_waiting:
            return  # the check already waiting will see this turn too
        self._work.put(session_key, CHECK)
        queue = self._work.state(session_key)
        assert queue is not None  # put made the slot
        queue.check_waiting = True

    async def archive_all(self, session: Session) -> None:
        """``/new``: archive every active message, in token-bounded chunks.

        Store errors propagate so the command can say archiving failed instead of
        starting fresh as if it had worked.
        """
        async with self._hold(session.key):
            limit = len(session.messages)
            while session.last_consolidated < limit:
                await self._archive_next(session, limit)
            if session.last_consolidated != len(session.messages):
                await self._sessions.set_last_consolidated(session, len(session.messages))

    async def force_round(self, session: Session) -> bool:
        """One round regardless of the estimate (context-overflow recovery).

        False when nothing could move: only the turn being answered is left.
        """
        try:
            async with self._hold(session.key):
                moved = await self._archive_next(session)
        except (LucidError, OSError):
            logger.exception("forced consolidation of %s failed", session.key)
            moved = False
        if not moved:
            self._emit("noop")
        return moved

    async def drain(self) -> None:
        """Wait until no session has consolidation queued or running, re-checks requested
        meanwhile included."""
        await self._work.wait_idle()

    # -- internals -------------------------------------------------------------------------
    @asynccontextmanager
    async def _hold(self, key: str) -> AsyncIterator[None]:
        """Consolidate ``key`` in the caller's task once its earlier work is done."""
        turn = _Turn()
        self._work.put(key, turn)
        try:
            await turn.granted.wait()
            yield
        finally:
            turn.released.set()

    async def _handle(self, key: str, item: _Turn | Literal["check"]) -> None:
        """The session worker's step: grant a caller its turn and wait for it, or run a check."""
        if isinstance(item, _Turn):
            if not item.released.is_set():  # not cancelled while it waited
                item.granted.set()
                await item.released.wait()
            return
        queue = self._work.state(key)
        if queue is not None:
            queue.check_waiting = False  # a schedule() from now on queues a re-check
        # A check belongs to no turn: it runs in a fresh context, never in the one of whoever
        # started this worker (a turn's role and token budget stay with that turn).
        await asyncio.create_task(self._check(key), name=f"consolidate:{key}", context=contextvars.Context())

    async def _check(self, key: str) -> None:
        try:
            session = await self._sessions.get(key)
            await self._run(session, working_set=True)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("background consolidation of %s failed", key)

    def conversation_tokens(self, session: Session) -> int:
        """Tokens of the messages still in context; each message counted once and cached."""
        return sum(cached_message_tokens(m) for m in session.active())

    def _over_working_set(self, session: Session, bound: int | None) -> bool:
        if bound is None:
            return False
        if sum(cached_message_bytes(m) for m in session.active()) <= bound:
            return False  # bytes bound tokens: no need to load the tokenizer
        return self.conversation_tokens(session) > bound

    async def _trim_due(self, session: Session, bound: int | None) -> bool:
        """``_over_working_set``, with the tokenizer loaded off the loop if it must count."""
        if bound is not None and sum(cached_message_bytes(m) for m in session.active()) > bound:
            await tokens.ready()
        return self._over_working_set(session, bound)

    async def _run(self, session: Session, *, fail_fast: bool = False, working_set: bool = False) -> int:
        """Rounds while over budget (call in the session's turn of its queue); chunks archived.

        ``fail_fast`` (before a turn, while the user waits): the model is called without
        retries, and after a failed summary the round stops — with the provider down the
        user hears about it from the turn at once instead of after every chunk's retries.
        """
        archived = 0
        estimate = await self._estimate(session)
        trim = working_set and await self._trim_due(session, self.working_set)
        if estimate >= self.budget or trim:
            queue = self._work.state(session.key)  # ours while we consolidate the session
            for _ in range(self.max_rounds):
                if queue is not None:
                    queue.summary_failed = False
                if not await self._archive_next(session, fail_fast=fail_fast):
                    if archived == 0:
                        logger.warning("%s is over budget but only the current turn is left "
                                       "to keep; nothing to archive", session.key)
                    break
                archived += 1
                if fail_fast and queue is not None and queue.summary_failed:
                    logger.warning("%s: the summariser failed; the rest waits for the check after "
                                   "the turn", session.key)
                    break
                estimate = await self._estimate(session)
                if estimate <= self.target and not (
                        trim and await self._trim_due(session, self.working_set_low)):
                    break
            else:
                if estimate >= self.budget and not trim:
                    logger.warning("%s is still over budget (%d >= %d tokens) after %d rounds",
                                   session.key, estimate, self.budget, self.max_rounds)
        if archived == 0:
            self._emit("noop")
        return archived

    async def _archive_next(self, session: Session, limit: int | None = None, *,
                            fail_fast: bool = False) -> bool:
        """Archive one chunk starting at ``last_consolidated``; False if nothing may move.

        ``limit`` is where archiving must stop (exclusive); by default the newest user
        message, i.e. the turn being answered.
        """
        start = session.last_consolidated
        if limit is None:
            limit = protected_start(session.messages, start)
        if limit <= start:
            return False
        snapshot = session.messages[start:limit]
        before_user = limit < len(session.messages)
        bound = self.chunk_tokens
        while True:
            cut = await asyncio.to_thread(find_cut, snapshot, bound, before_user=before_user)
            if cut is None:  # unreachable for a non-empty snapshot; guard the invariant anyway
                raise AssertionError(f"no cut found in {len(snapshot)} messages of {session.key}")
            end = start + cut.end
            chunk = snapshot[: cut.end]
            source = self._provenance(session, chunk)
            # A shared chat's lines go to the summariser with their speakers, so its bullets
            # (and a raw fallback) say who said what, and the entry records who spoke.
            shown = labelled(chunk) if is_shared(source.chat_type) else chunk
            if cut.oversize:
                logger.info("%s: messages %d-%d form one unit of %d tokens (bound %d); truncating "
                            "it for the summary", session.key, start, end - 1, cut.tokens, bound)
            try:
                content, raw = await self._summarise(session.key, shown, start, end - 1, bound,
                                                     fail_fast=fail_fast, shared=shown is not chunk)
            except PromptTooLong:
                if bound // 2 < MIN_CHUNK_TOKENS:
                    content, raw = await asyncio.to_thread(raw_entry, shown, first=start, last=end - 1), True
                    break
                bound //= 2  # the estimate was low for this model: split the chunk and retry
                logger.warning("%s: summary request for messages %d-%d overflowed; retrying with "
                               "chunks of %d tokens", session.key, start, end - 1, bound)
                continue
            break
        if content:
            await self._store.append_history(
                content, session_key=session.key, channel=source.channel, chat_type=source.chat_type,
                owner=source.owner, speakers=speakers_of(chunk) if is_shared(source.chat_type) else ())
        await self._sessions.set_last_consolidated(session, end)
        logger.debug("%s: archived messages %d-%d (%s cut, %d tokens%s)", session.key, start,
                     end - 1, cut.kind, cut.tokens, ", raw" if raw else "")
        self._emit("raw_fallback" if raw else "archived")
        return True

    async def _summarise(self, key: str, chunk: list[dict[str, Any]], first: int, last: int,
                         bound: int, *, fail_fast: bool = False, shared: bool = False) -> tuple[str, bool]:
        """(history entry text, whether it is a raw fallback); "" means nothing to keep.

        Raises ``PromptTooLong`` when the model refuses the request as too long."""
        request = await asyncio.to_thread(build_request, chunk, session_key=key, first=first,
                                          last=last, max_transcript_tokens=bound, shared=shared)
        try:
            result = await self._model.complete(request, job="consolidation", session_key=key,
                                                max_tokens=self._answer_tokens,
                                                retries=0 if fail_fast else None)
        except (asyncio.CancelledError, PromptTooLong):
            raise
        except Exception as exc:
            queue = self._work.state(key)
            if queue is not None:
                queue.summary_failed = True
            # The type only: provider error texts may echo request details.
            logger.warning("summary of %s messages %d-%d failed (%s); archiving raw", key,
                           first, last, type(exc).__name__)
        else:
            summary = parse_summary(result.content)
            if summary is not None:
                return summary, False
            logger.warning("summary of %s messages %d-%d was empty or not bullets; archiving raw",
                           key, first, last)
        return await asyncio.to_thread(raw_entry, chunk, first=first, last=last), True

    def _emit(self, event: str) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            logger.exception("consolidation event hook failed for %r", event)
