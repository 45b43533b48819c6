"""The narrow protocols through which memory reaches the model (DESIGN §1).

Memory knows nothing about litellm, channels or the gateway: the composition root hands
the Consolidator and Dream an object satisfying ``ChatModel``. Tests can satisfy it with
the real gateway runner pointed at the fake OpenAI server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Coroutine
from typing import Any, Protocol


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


class ChatModel(Protocol):
    """One chat-completion call, with our retries; raises ``LucidError`` subclasses on failure.

    ``job`` names the caller for usage accounting ("turn", "consolidation", "dream",
    "heartbeat"); ``session_key`` attributes the tokens to a session when there is one.
    ``on_text``, when given, asks for a streamed answer and receives the text so far.
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
    ) -> ChatResult: ...
