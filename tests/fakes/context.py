"""A ``TurnContext`` for tool tests: the terminal chat, owner by default."""

from __future__ import annotations

from pathlib import Path

from lucidgate.gateway.tools.turn import TurnContext


def make_ctx(workspace: Path, role: str = "owner") -> TurnContext:
    return TurnContext(
        session_key="cli:1", channel="cli", chat_id="1", sender_id="u1",
        role=role, chat_type="private", workspace=workspace,  # type: ignore[arg-type]
    )
