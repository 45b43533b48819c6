"""One turn: the shared tool loop (``gateway/agent/toolloop.py``) over the session's log.

The log is its own checkpoint: the assistant message carrying ``tool_calls`` is appended
before the tools run and each tool result as it completes, so a crash at any point leaves
a transcript the next start can resume from. Context overflow is handled in steps: retry
with long tool results truncated (skipped when no result is long — the same request would
only fail again), then after a forced consolidation round, then fail with advice that fits
where the overflow came from (this turn's tool results, or the conversation as a whole).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

from lucidgate.channels.messages import TurnUsage
from lucidgate.gateway.agent.context import HISTORY_HEADER, RECALL_HEADER, ContextBuilder
from lucidgate.gateway.approvals import OUTSIDE_KEY, Approvals, TurnTaint
from lucidgate.gateway.errors import ContextOverflowError, LLMError
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.tools.base import ToolOutput, ToolRegistry
from lucidgate.gateway.agent.toolloop import LoopLimits, run_tool_loop
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory import tokens
from lucidgate.memory.protocols import ChatModel, ChatResult, LoopOutcome, LoopStats, ToolCall
from lucidgate.memory.sessions import Session, SessionStore

logger = logging.getLogger(__name__)

OVERFLOW_TOOL_RESULT_LIMIT = 2000
# (answer, write-the-transcript-line, the turn's tokens): the caller records the answer
# durably, writes, sends.
FinalHandler = Callable[[str, Callable[[], Awaitable[None]], TurnUsage], Awaitable[None]]
# Waits (bounded) until tool sources still starting have come up; returns what never did.
ToolsReady = Callable[[], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class TurnResult:
    text: str
    iterations: int
    tool_calls: int


class TurnRunner:
    def __init__(self, *, model: ChatModel, builder: ContextBuilder, tools: ToolRegistry,
                 sessions: SessionStore, max_iterations: int,
                 force_consolidation: Callable[[Session], Awaitable[bool]] | None = None,
                 metrics: Metrics | None = None,
                 progress: Callable[[TurnContext, str, str | None], Awaitable[None]] | None = None,
                 streaming_channels: frozenset[str] = frozenset(),
                 live_readers: Collection[str] = frozenset(),
                 tools_ready: ToolsReady | None = None,
                 approvals: Approvals | None = None) -> None:
        self.model = model
        self.builder = builder
        self.tools = tools
        self.sessions = sessions
        self.max_iterations = max_iterations
        self.force_consolidation = force_consolidation
        self.metrics = metrics
        self.progress = progress
        self.streaming_channels = streaming_channels
        self.live_readers = live_readers  # message ids someone reads live (webhook `stream: true`)
        self.tools_ready = tools_ready
        self.approvals = approvals  # holds owner-power calls of a tainted turn for the owner

    async def run(self, session: Session, ctx: TurnContext, *,
                  on_final: FinalHandler | None = None) -> TurnResult:
        """Run the model/tool loop until a final answer; raises ``LLMError`` on failure
        (for the owner, with the provider's own words in short).

        ``on_final(text, write)`` records the answer in the durable outbox, then calls
        ``write`` (the transcript line), then sends: a crash in between resends or answers
        again — never a transcript that says "answered" for a reply nobody will ever send."""
        # Before the tool list is built: a turn right after start must not miss the tools of
        # a server that is still starting (a one-shot run has no second turn).
        unavailable = await self.tools_ready() if self.tools_ready is not None else []
        await self.builder.refresh()
        limits = LoopLimits(max_iterations=self.max_iterations,
                            max_result_chars=self.tools.max_result_chars)
        conversation = _TurnConversation(self, session, ctx)
        stats = LoopStats()
        started = time.monotonic()
        status = "error"
        try:
            outcome = await run_tool_loop(conversation, limits, stats)
            status = outcome.stop
        except ContextOverflowError:
            raise
        except LLMError as exc:
            detail = getattr(exc, "detail", None)
            if ctx.is_owner and detail:
                raise LLMError(f"{exc} (the provider said: {detail})") from exc
            raise
        finally:
            log_turn(ctx, getattr(self.model, "model", "?"), stats, conversation.tools_run, started, status)
        text = _final_text(outcome, self.max_iterations)
        if unavailable and ctx.is_owner and not ctx.silent:
            text += "\n\n_(" + unavailable_note(unavailable) + ")_"

        async def write() -> None:
            await self.sessions.append(session, {"role": "assistant", "content": text})

        if on_final is not None:
            await on_final(text, write, TurnUsage(stats.prompt_tokens, stats.completion_tokens))
        else:
            await write()
        return TurnResult(text, outcome.stats.iterations, outcome.stats.tool_calls)

    def _on_text(self, ctx: TurnContext) -> Callable[[str], Coroutine[Any, Any, None]] | None:
        """Stream the answer as previews only where the channel asked for it."""
        if self.progress is None or not self._streams(ctx):
            return None
        progress = self.progress

        async def on_text(text: str) -> None:
            await progress(ctx, text, None)

        return on_text

    async def announce_tool(self, ctx: TurnContext, name: str) -> None:
        """Say in the progress line which tool runs ("running grep…"), where it streams."""
        if self.progress is not None and self._streams(ctx):
            await self.progress(ctx, "", f"running {name}…")

    def _streams(self, ctx: TurnContext) -> bool:
        if ctx.silent:
            return False  # a memory flush: nobody sees it
        return ctx.channel in self.streaming_channels or (ctx.message_id or "") in self.live_readers

    async def _complete(self, session: Session, ctx: TurnContext, taint: TurnTaint | None = None) -> ChatResult:
        schemas = self.tools.schemas(ctx) or None
        for step in ("as is", "tool results truncated", "after a consolidation round"):
            if step == "tool results truncated" and not _has_long_tool_result(session):
                continue  # the same request would only overflow again
            if step == "after a consolidation round" and (
                    self.force_consolidation is None or not await self.force_consolidation(session)):
                break
            limit = None if step == "as is" else OVERFLOW_TOOL_RESULT_LIMIT
            messages = await self.builder.build(session, ctx, tool_result_limit=limit)
            if taint is not None:
                _note_prompt(taint, ctx, messages)
            try:
                return await self.model.complete(
                    messages, tools=schemas, job="turn", session_key=session.key,
                    on_text=self._on_text(ctx) if step == "as is" else None)
            except ContextOverflowError:
                logger.warning("context overflow in %s (%s)", session.key, step)
        if _turn_has_tool_results(session):
            raise ContextOverflowError(
                "this turn's tool results no longer fit the model's context window; ask for less "
                "at a time (fewer or narrower tool calls), use a model with a bigger context "
                "window, or /stop a turn that keeps going")
        raise ContextOverflowError(
            "this conversation no longer fits the model's context window; send /new to start "
            "fresh (nothing is lost: it is archived to memory)")


class _TurnConversation:
    """The turn's side of the tool loop: prompts rebuilt from the session log, every
    message appended to it as a checkpoint, tools run through the registry."""

    def __init__(self, runner: TurnRunner, session: Session, ctx: TurnContext) -> None:
        self.runner, self.session, self.ctx = runner, session, ctx
        self.tools_run: list[str] = []
        # Who the model has heard in this turn so far: the chat's lines and earlier results
        # (read from the log, so a resumed turn starts as tainted as it was).
        self.taint = TurnTaint.of_turn(session.active(), ctx)
        self._outside: dict[str, str] = {}  # tool call id -> whose words its result holds

    async def request(self) -> ChatResult:
        return await self.runner._complete(self.session, self.ctx, self.taint)

    async def record(self, message: dict[str, Any]) -> None:
        outside = self._outside.pop(str(message.get("tool_call_id")), None) \
            if message.get("role") == "tool" else None
        if outside is not None:
            message = {**message, OUTSIDE_KEY: outside}
        await self.runner.sessions.append(self.session, message)

    async def execute(self, call: ToolCall) -> str:
        started = time.monotonic()
        output = ToolOutput.error("the tool crashed")
        approvals = self.runner.approvals
        if approvals is not None:
            held = await approvals.screen(self.ctx, call.name, call.arguments, self.taint,
                                          turn=self.ctx.message_id or call.id)
            if held is not None:
                self.tools_run.append(f"{call.name} (held)")
                return held
        self.tools_run.append(call.name)
        await self.runner.announce_tool(self.ctx, call.name)
        try:
            output = await self.runner.tools.execute(self.ctx, call.name, call.arguments)
            if call.name == "memory_forget" and not output.failed:
                # The turn's next request must not carry the forgotten text in its memory section.
                await self.runner.builder.refresh()
            if output.outside is not None:  # the turn has now seen the outside world's words
                self.taint.note(output.outside, output)
                self._outside[call.id] = output.outside
            return output
        finally:
            if self.runner.metrics is not None:
                self.runner.metrics.tool_call(call.name, "error" if output.failed else "ok")
            logger.debug("tool %s ran for %.3fs", call.name, time.monotonic() - started)


def _note_prompt(taint: TurnTaint, ctx: TurnContext, messages: list[dict[str, Any]]) -> None:
    system = str(messages[0].get("content") or "") if messages else ""
    user = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    taint.note_prompt(ctx, system, user, history_header=HISTORY_HEADER, recall_header=RECALL_HEADER)


def _final_text(outcome: LoopOutcome, max_iterations: int) -> str:
    if outcome.stop == "repeated":
        return (f"I stopped: the model kept calling {outcome.repeated_tool} with the same "
                "arguments without getting anywhere. Try rephrasing the request or asking for "
                "one step at a time.")
    if outcome.stop == "iterations":
        return (f"I stopped after {max_iterations} tool steps without finishing: that is the "
                "limit per turn (agents.defaults.maxToolIterations). Say \"continue\" to go on "
                "from here, narrow the task, or raise the setting.")
    return outcome.text or "(no answer)"


def unavailable_note(unavailable: list[str]) -> str:
    """One line naming the tool servers this turn had to do without."""
    return ("answered without the tools of " + "; ".join(unavailable)
            + " — not available yet; /status shows their state")


def _current_turn(session: Session) -> list[dict[str, Any]]:
    active = session.active()
    for index in range(len(active) - 1, -1, -1):
        if active[index].get("role") == "user":
            return active[index + 1 :]
    return active


def _turn_has_tool_results(session: Session) -> bool:
    return any(m.get("role") == "tool" for m in _current_turn(session))


def _has_long_tool_result(session: Session) -> bool:
    """Whether truncating tool results would change the request at all."""
    return any(m.get("role") == "tool" and len(str(m.get("content") or "")) > OVERFLOW_TOOL_RESULT_LIMIT
               for m in session.active())


class PromptEstimator:
    """Tokens the session's next prompt would take; cheap enough to run after every turn.

    Per-message counts are cached on the in-memory message dicts (``_tok`` / ``_bytes``,
    never written to disk), and the system prompt's count by its text, so the cost per
    call is a sum.
    """

    RUNTIME_BLOCK_TOKENS = 60

    def __init__(self, builder: ContextBuilder, tools: ToolRegistry, *, budget: int | None = None,
                 scale: Callable[[int], int] | None = None) -> None:
        self.builder = builder
        self.tools = tools
        self.budget = budget
        # cl100k count -> the provider's tokens (memory.calibration); identity when None.
        self.scale: Callable[[int], int] = scale or (lambda n: n)
        # Keyed by (role, registry generation): MCP servers add tools after the start.
        self._tool_bytes: dict[tuple[bool, int], int] = {}
        self._system_counts: dict[int, int] = {}
        self._tool_counts: dict[tuple[bool, int], int] = {}

    async def estimate(self, session: Session, ctx: TurnContext) -> int:
        """Tokens of the next prompt — or, when that is clearly small, a cheap upper bound.

        A BPE token covers at least one byte, so the prompt's UTF-8 size bounds its token
        count. While that bound is under the budget the exact count cannot matter, and the
        tokenizer is never touched: short sessions (and a one-shot CLI) skip it entirely.
        """
        system = await self.builder.system_prompt(ctx)
        if self.budget is not None:
            bound = self.scale(self._byte_bound(system, session, ctx))
            if bound < self.budget:
                return bound
        await tokens.ready()  # a short-lived process loads the tokenizer only now, off the loop
        key = hash(system)
        system_tokens = self._system_counts.get(key)
        if system_tokens is None:
            if len(self._system_counts) > 64:
                self._system_counts.clear()
            system_tokens = self._system_counts[key] = tokens.count_text(system)
        tool_key = (ctx.is_owner, self.tools.generation)
        tool_tokens = self._tool_counts.get(tool_key)
        if tool_tokens is None:
            tool_tokens = self._tool_counts[tool_key] = tokens.count_tools(self.tools.schemas(ctx))
        total = system_tokens + tool_tokens + self.RUNTIME_BLOCK_TOKENS
        for msg in session.active():
            total += tokens.cached_message_tokens(msg)
        return self.scale(total)

    def _byte_bound(self, system: str, session: Session, ctx: TurnContext) -> int:
        tool_key = (ctx.is_owner, self.tools.generation)
        tool_bytes = self._tool_bytes.get(tool_key)
        if tool_bytes is None:
            schemas = json.dumps(self.tools.schemas(ctx), ensure_ascii=False, separators=(",", ":"))
            tool_bytes = self._tool_bytes[tool_key] = len(schemas.encode("utf-8"))
        total = len(system.encode("utf-8")) + tool_bytes + 4 * self.RUNTIME_BLOCK_TOKENS
        for msg in session.active():
            total += tokens.cached_message_bytes(msg)
        return total


def log_turn(ctx: TurnContext, model: str, stats: LoopStats, tools: list[str], started: float,
             status: str) -> None:
    """The one INFO line of a turn; in JSON logs its facts are fields of their own
    (``jq 'select(.session == "telegram:42") | .ms'``), beside the turn id the loop binds."""
    ms = round((time.monotonic() - started) * 1000)
    fields = {"session": ctx.session_key, "channel": ctx.channel, "model": model, "status": status,
              "tokens_in": stats.prompt_tokens, "tokens_out": stats.completion_tokens, "tools": tools,
              "ms": ms}
    logger.info("turn %s on %s: %s in %d ms, %s, %d tokens in / %d out, tools: %s", ctx.session_key,
                ctx.channel, status, ms, model, stats.prompt_tokens, stats.completion_tokens,
                ", ".join(tools) or "none", extra={"fields": fields})
