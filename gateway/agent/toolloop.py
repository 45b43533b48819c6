"""The one model/tool loop, used by turns (``gateway/agent/runner.py``) and Dream phase 2.

Everything that must hold whoever drives the model lives here, once:

- **limits**: at most ``max_iterations`` model calls, and a token budget when one is set;
- **truncation**: a tool result longer than ``max_result_chars`` is cut with a marker;
- **errors as tool messages**: a tool that raises becomes ``Error: …`` for the model via
  ``gateway.tools.base.error_result`` (the registry uses the same), so one bad call never
  ends the turn;
- **usage**: tokens, iterations and tool calls are tallied in a ``LoopStats`` as they happen;
- **the repeated-call guard**: the same tool with the same arguments (compared as canonical
  JSON) more than ``MAX_REPEATS`` times in one run — or, for Dream, twice in a row — is not
  executed; the model is told so in the tool result and the loop ends with ``repeated``;
- **cut answers**: ``finish_reason: "length"`` marks the text as cut (the caller says so),
  and a tool call whose JSON arguments were cut is never executed.

What differs between consumers sits behind ``Conversation``: how a request is made (a turn
rebuilds its prompt from the session log and recovers from overflow; Dream sends its list),
where messages go (a turn appends them to the session log as checkpoints; Dream keeps them
in memory) and how a call runs (the tool registry; Dream's confined file tools).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lucidgate.gateway.tools.base import error_result
from lucidgate.memory.protocols import ChatModel, ChatResult, LoopOutcome, LoopStats, ToolCall

logger = logging.getLogger(__name__)

__all__ = ["Conversation", "LoopLimits", "ModelToolLoop", "RepeatGuard", "run_tool_loop", "truncate"]

MAX_REPEATS = 2
TRUNCATION_MARKER = "\n…[truncated: {dropped} more characters; ask for a narrower range]"
CUT_NOTE = ("[This answer was cut off: it reached the reply length limit "
            "(agents.defaults.maxCompletionTokens).]")


class Conversation(Protocol):
    """The consumer's side of the loop."""

    async def request(self) -> ChatResult:
        """One model call with the messages so far (and the tools)."""

    async def record(self, message: dict[str, Any]) -> None:
        """Keep an assistant or tool message (the next ``request`` must include it)."""

    async def execute(self, call: ToolCall) -> str:
        """Run one tool call; ``Error: …`` for a refusal."""


@dataclass(frozen=True, slots=True)
class LoopLimits:
    max_iterations: int
    token_budget: int | None = None
    max_result_chars: int | None = None
    stop_on_consecutive_repeat: bool = False


def truncate(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + TRUNCATION_MARKER.format(dropped=len(text) - limit)


def canonical_arguments(arguments: str) -> str:
    """Arguments as comparable text: key order and spacing must not hide a repeat."""
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        return arguments


class RepeatGuard:
    """Counts identical calls within one run; ``check`` says why a call must not run."""

    def __init__(self, *, max_repeats: int = MAX_REPEATS, consecutive: bool = False) -> None:
        self.max_repeats = max_repeats
        self.consecutive = consecutive
        self._seen: Counter[tuple[str, str]] = Counter()
        self._previous: tuple[str, str] | None = None

    def check(self, call: ToolCall) -> str | None:
        key = (call.name, canonical_arguments(call.arguments))
        self._seen[key] += 1
        repeated_now = self.consecutive and key == self._previous
        self._previous = key
        if self._seen[key] > self.max_repeats or repeated_now:
            times = "twice in a row" if repeated_now else f"{self._seen[key]} times"
            return (f"Error: not run — you called {call.name} with these same arguments {times} "
                    "in this turn and the result will not change. Stop repeating it: answer with "
                    "what you have, or say what is blocking you.")
        return None


def _intact(call: ToolCall) -> bool:
    try:
        json.loads(call.arguments or "{}")
    except ValueError:
        return False
    return True


async def run_tool_loop(conversation: Conversation, limits: LoopLimits,
                        stats: LoopStats | None = None) -> LoopOutcome:
    """Drive ``conversation`` until a final answer or a limit; see the module docstring."""
    stats = stats if stats is not None else LoopStats()
    guard = RepeatGuard(consecutive=limits.stop_on_consecutive_repeat)
    for _ in range(limits.max_iterations):
        if limits.token_budget is not None and stats.tokens >= limits.token_budget:
            return LoopOutcome("budget", "", stats)
        result = await conversation.request()
        stats.iterations += 1
        stats.prompt_tokens += result.usage.prompt_tokens
        stats.completion_tokens += result.usage.completion_tokens
        calls = list(result.tool_calls)
        if result.cut and calls:
            dropped = [c.name for c in calls if not _intact(c)]
            if dropped:
                logger.warning("answer cut at the length limit: not running %s with cut-off "
                               "arguments", ", ".join(dropped))
                calls = [c for c in calls if _intact(c)]
        if not calls:
            text = (result.content or "").strip()
            if result.cut:
                return LoopOutcome("cut", f"{text}\n\n{CUT_NOTE}" if text else CUT_NOTE, stats)
            return LoopOutcome("done", text, stats)
        # ``content`` is always present: some servers reject a tool-call message without it.
        await conversation.record({"role": "assistant", "content": result.content or "",
                                   "tool_calls": [c.as_message_part() for c in calls]})
        repeated: str | None = None
        for call in calls:
            refusal = guard.check(call)
            if refusal is not None:
                logger.warning("repeated tool call %s not run; ending the loop", call.name)
                repeated = repeated or call.name
                output = refusal
            elif repeated is not None:
                output = "Error: not run — the turn is ending because of a repeated tool call."
            else:
                output = truncate(await _execute(conversation, call), limits.max_result_chars)
                stats.tool_calls += 1
            await conversation.record({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                       "content": output})
        if repeated is not None:
            return LoopOutcome("repeated", "", stats, repeated_tool=repeated)
    return LoopOutcome("iterations", "", stats)


async def _execute(conversation: Conversation, call: ToolCall) -> str:
    started = time.monotonic()
    try:
        return await conversation.execute(call)
    except Exception as exc:  # noqa: BLE001 - the model reads the error; the log keeps the trace
        return error_result(call.name, exc)
    finally:
        logger.debug("tool %s took %.3fs", call.name, time.monotonic() - started)


class _ListConversation:
    """A conversation kept in a message list (Dream phase 2)."""

    def __init__(self, model: ChatModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 execute: Callable[[ToolCall], Awaitable[str]], job: str, max_tokens: int | None) -> None:
        self.model, self.messages, self.tools = model, messages, tools
        self._execute, self.job, self.max_tokens = execute, job, max_tokens

    async def request(self) -> ChatResult:
        return await self.model.complete(self.messages, tools=self.tools or None, job=self.job,
                                         max_tokens=self.max_tokens)

    async def record(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def execute(self, call: ToolCall) -> str:
        return await self._execute(call)


class ModelToolLoop:
    """Implements ``memory.protocols.ToolLoop`` over a ``ChatModel`` (handed to Dream)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model

    async def run(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]],
        execute: Callable[[ToolCall], Awaitable[str]],
        job: str,
        max_iterations: int,
        token_budget: int | None = None,
        max_result_chars: int | None = None,
        max_tokens: int | None = None,
        stop_on_consecutive_repeat: bool = False,
        stats: LoopStats | None = None,
    ) -> LoopOutcome:
        conversation = _ListConversation(self.model, messages, tools, execute, job, max_tokens)
        limits = LoopLimits(max_iterations=max_iterations, token_budget=token_budget,
                            max_result_chars=max_result_chars,
                            stop_on_consecutive_repeat=stop_on_consecutive_repeat)
        return await run_tool_loop(conversation, limits, stats)
