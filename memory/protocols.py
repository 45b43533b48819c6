"""The narrow protocols through which memory reaches the model (DESIGN §1).

Memory knows nothing about litellm, channels or the gateway: the composition root hands
the Consolidator and Dream an object satisfying ``ChatModel``, Dream a ``ToolLoop`` (the
gateway's one tool loop, shared with turns) and the Consolidator a ``PromptSizer`` (the
turn's own prompt estimate). Tests satisfy them with the gateway's real model client pointed at the
fake OpenAI server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from lucidgate.memory.sessions import Session


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it (may be malformed)

    def as_message_part(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class ChatResult:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    @property
    def cut(self) -> bool:
        """The answer hit the completion-token limit: its text (or tool-call JSON) is cut."""
        return self.finish_reason == "length"


class ChatModel(Protocol):
    """One chat-completion call, with our retries; raises ``LucidError`` subclasses on failure.

    ``job`` names the caller for usage accounting ("turn", "consolidation", "dream",
    "heartbeat"); ``session_key`` attributes the tokens to a session when there is one.
    ``on_text``, when given, asks for a streamed answer and receives the text so far.
    ``retries`` overrides how often a transient failure is retried (0: fail fast). An
    empty answer is never returned: it is asked again once, then raises.
    """

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        job: str,
        session_key: str | None = None,
        max_tokens: int | None = None,
        on_text: Callable[[str], Coroutine[Any, Any, None]] | None = None,
        retries: int | None = None,
    ) -> ChatResult: ...


StopReason = Literal["done", "cut", "iterations", "repeated", "budget"]


@dataclass(slots=True)
class LoopStats:
    """What a tool loop has used so far; updated as it goes, so a caller still knows the
    tokens spent when the loop raises half-way."""

    iterations: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class LoopOutcome:
    """How a tool loop ended. ``text`` is the model's final answer (``done`` / ``cut``);
    ``repeated_tool`` names the call the repeated-call guard stopped."""

    stop: StopReason
    text: str
    stats: LoopStats
    repeated_tool: str | None = None


class ToolLoop(Protocol):
    """The model/tool loop with every limit in one place (iterations, token budget,
    result truncation, the repeated-call guard, cut answers, errors as tool results).

    ``execute`` runs one call and returns its result text (``Error: …`` for refusals; an
    exception becomes an error result too). The loop appends the assistant and tool
    messages to ``messages`` in place. Raises ``LucidError`` subclasses when the model
    cannot answer at all.
    """

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
    ) -> LoopOutcome: ...


class PromptSizer(Protocol):
    """Tokens the session's next prompt would take, as the turn would build it (system
    prompt, tools, history) — injected so consolidation measures exactly what a turn sends."""

    async def __call__(self, session: Session) -> int: ...
