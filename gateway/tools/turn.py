"""The per-turn context value handed to tools and commands (a value, so tools hold no per-request state).

Frozen: tools hold no per-request state; everything a tool needs to know about who is
asking, and from where, travels in this value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lucidgate.channels.messages import Target

Role = Literal["owner", "guest"]


@dataclass(frozen=True, slots=True)
class TurnContext:
    session_key: str
    channel: str
    chat_id: str
    sender_id: str
    role: Role
    chat_type: str
    workspace: Path
    thread_id: str | None = None
    message_id: str | None = None
    silent: bool = False  # a turn whose answer nobody is sent (the memory flush)
    spender: str | None = None  # who pays for a guest's turn when not its sender (a credential)

    @property
    def is_owner(self) -> bool:
        return self.role == "owner"

    @property
    def is_owner_private(self) -> bool:
        """The owner in a one-to-one chat: the only place USER.md and MEMORY.md appear."""
        return self.role == "owner" and self.chat_type == "private"

    @property
    def payer(self) -> str:
        """Whose share of the guests' daily budget this turn spends."""
        return self.spender or f"{self.channel}:{self.sender_id}"

    @property
    def target(self) -> Target:
        return Target(self.channel, self.chat_id, self.thread_id, self.message_id)
