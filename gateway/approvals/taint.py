"""Taint: the least-trusted voice a turn has seen, decided in code from provenance.

A turn starts clean only when everything in front of the model is the owner's own words (or
the gateway's: the system prompt, bootstrap files, the owner's memory). It becomes tainted —
for the rest of the turn — by the first of:

- a guest's line in the chat's conversation (transcript lines carry the role their gate
  stamped, ``sender_role``), or a guest's own turn;
- a shared chat's remembered material: its archived history or auto-recalled snippets, which
  hold whatever its members said;
- a tool result carrying outside text (``ToolOutput.outside``: a web page, an MCP server's
  answer, a guest's search hit), as soon as it enters the turn.

The first source is kept (``Taint``) so the owner is told *why* an action was held. The scan
reads the transcript, so a turn resumed after a restart is exactly as tainted as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lucidgate.gateway.tools.turn import TurnContext

QUOTE_CHARS = 200
# A transcript tool line that was outside text says so (``outside``), so a resumed turn knows.
OUTSIDE_KEY = "outside"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True, slots=True)
class Taint:
    """Where the untrusted words came from, and the first of them (quoted as material)."""

    origin: str
    quote: str


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, control characters removed, one line."""
    flat = " ".join(CONTROL.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class TurnTaint:
    """The taint of one turn; ``first`` is None while the turn is clean."""

    def __init__(self) -> None:
        self.first: Taint | None = None

    @property
    def tainted(self) -> bool:
        return self.first is not None

    def note(self, origin: str, text: str) -> None:
        if self.first is None:
            self.first = Taint(origin, quoted(text))

    @classmethod
    def of_turn(cls, messages: Iterable[dict[str, Any]], ctx: TurnContext) -> TurnTaint:
        """The taint the turn carries before its next step: the chat's lines (``messages``: the
        active part of its transcript) and the tool results already in it."""
        taint = cls()
        if not ctx.is_owner:
            taint.note(f"a guest's message ({ctx.channel} user {ctx.sender_id})", "")
        for line in messages:
            role = line.get("role")
            if role == "user" and line.get("sender_role", "owner") != "owner":
                who = line.get("sender_id") or "unknown"
                taint.note(f"a guest's message in {ctx.session_key} (user {who})", str(line.get("content") or ""))
            elif role == "tool" and isinstance(line.get(OUTSIDE_KEY), str):
                taint.note(str(line[OUTSIDE_KEY]), str(line.get("content") or ""))
        return taint

    def note_prompt(self, ctx: TurnContext, system: str, user: str, *, history_header: str,
                    recall_header: str) -> None:
        """A shared chat's remembered material in the prompt: its history section, its recall."""
        if ctx.chat_type == "private":
            return  # a private chat's history and recall are the owner's own (or its guest's)
        if history_header in system:
            text = system.split(history_header, 1)[1]
            self.note(f"the archived history of the shared chat {ctx.session_key}", text)
        if recall_header in user:
            text = user.split(recall_header, 1)[1]
            self.note(f"snippets recalled from the shared chat {ctx.session_key}", text)
