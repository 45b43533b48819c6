"""Where a consolidation chunk may end (DESIGN §5.2).

A chunk starts at ``last_consolidated`` and must leave the remaining transcript valid for
the provider: the active messages may never start with a ``tool`` result whose assistant
``tool_calls`` message was archived. So a chunk ends either

* just before a ``user`` message (a user-turn boundary, preferred), or
* right after the last ``tool`` result that completes an assistant's tool calls (a
  completed tool exchange: the fallback inside one giant turn).

The chunk is bounded by tokens, not messages. If no legal cut falls inside the bound, the
smallest legal unit is taken even though it is oversize (the summariser truncates it):
a consolidation that cannot move would grow the session until every turn overflows.

Pure functions over a snapshot of messages; they count tokens, so callers run them in a
worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lucidgate.memory.tokens import count_message

CutKind = Literal["user", "tool", "end"]


@dataclass(frozen=True, slots=True)
class Cut:
    """``messages[:end]`` of the searched snapshot form the chunk."""

    end: int
    kind: CutKind  # "end": the snapshot ran out (nothing after it is protected)
    tokens: int
    oversize: bool  # the smallest legal unit alone exceeds the bound


def protected_start(messages: Sequence[dict[str, Any]], start: int) -> int:
    """Index of the newest user message at or after ``start`` (the turn being answered).

    Everything from there on stays in the session. With no user message in the active
    range nothing is protected (returns ``len(messages)``).
    """
    for i in range(len(messages) - 1, start - 1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages)


def _reach(messages: Sequence[dict[str, Any]]) -> dict[int, int]:
    """For each assistant ``tool_calls`` message: the index of its last result present.

    Results that never arrived (an interrupted step) do not extend the reach; a later
    user message ends that exchange for good.
    """
    result_at: dict[str, int] = {}
    for i, msg in enumerate(messages):
        if msg.get("role") == "tool" and msg.get("tool_call_id"):
            result_at[str(msg["tool_call_id"])] = i
    reach: dict[int, int] = {}
    for i, msg in enumerate(messages):
        calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
        if not calls:
            continue
        ends = [result_at.get(str(c.get("id")), -1) for c in calls if isinstance(c, dict)]
        reach[i] = max(ends, default=-1)
    return reach


def find_cut(messages: Sequence[dict[str, Any]], bound: int, *, before_user: bool) -> Cut | None:
    """The end of the next chunk of ``messages`` (a snapshot starting at ``last_consolidated``).

    ``before_user`` says the snapshot stops just before a protected user message, so its
    end is a user-turn boundary. Returns None only for an empty snapshot: otherwise the
    end of the snapshot is always a legal cut, so the search always makes progress.
    """
    if not messages:
        return None
    reach = _reach(messages)
    furthest = -1  # highest index a tool result of an already-seen call sits at
    total = 0
    best_user: Cut | None = None
    best_tool: Cut | None = None
    last = len(messages)
    for i, msg in enumerate(messages):
        furthest = max(furthest, reach.get(i, -1))
        total += count_message(msg)
        end = i + 1
        kind: CutKind | None = None
        if end == last:
            kind = "user" if before_user else "end"
        elif furthest < end and messages[end].get("role") != "tool":
            if messages[end].get("role") == "user":
                kind = "user"
            elif msg.get("role") == "tool":
                kind = "tool"
        if total <= bound:
            if kind in ("user", "end"):
                best_user = Cut(end, kind, total, False)
            elif kind == "tool":
                best_tool = Cut(end, kind, total, False)
            continue
        if best_user is not None or best_tool is not None:
            break
        if kind is not None:
            return Cut(end, kind, total, True)
    return best_user or best_tool
