"""Stored transcript lines as a chat-completions message list a provider accepts.

A transcript is a log, not a request: it holds bookkeeping fields, error and cancel markers,
tool calls a crash or ``/stop`` left without results, and reminder lines that may land inside a
turn. ``sanitise`` turns it into a list no provider rejects, never re-running anything.
"""

from __future__ import annotations

from typing import Any

from lucidgate.memory.sessions import REMINDER_KIND

__all__ = ["INTERRUPTED_RESULT", "sanitise"]

INTERRUPTED_RESULT = "[interrupted: this tool call did not complete and was not re-run]"
_LLM_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def sanitise(messages: list[dict[str, Any]], *, tool_result_limit: int | None = None) -> list[dict[str, Any]]:
    """Turn transcript lines into a valid chat-completions message list.

    Drops bookkeeping fields and error/cancel markers, drops orphan tool results, and gives
    every assistant tool call a result (an "interrupted" note when the log has none), so a
    crashed or stopped turn never produces a request the provider rejects. A reminder line
    that landed inside a turn (a shutdown writes the reminders it holds, even after a turn it
    cut off) is shown after that turn's answer, or before its question while it has none, so
    it never splits a tool step or ends the prompt as if it were the answer.
    """
    out: list[dict[str, Any]] = []
    open_calls: dict[str, str] = {}
    held: list[dict[str, Any]] = []  # reminder lines written while a turn was unanswered
    open_turn: int | None = None  # where in ``out`` the unanswered turn's question is

    def close_open_calls() -> None:
        for call_id, name in open_calls.items():
            out.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": INTERRUPTED_RESULT})
        open_calls.clear()

    for raw in messages:
        role = raw.get("role")
        if role == "tool":
            call_id = raw.get("tool_call_id")
            if call_id not in open_calls:
                continue
            open_calls.pop(call_id)
            msg = {k: raw[k] for k in _LLM_KEYS if k in raw}
            content = msg.get("content") or ""
            if tool_result_limit is not None and len(content) > tool_result_limit:
                msg["content"] = content[:tool_result_limit] + "\n…[truncated to fit the context window]"
            out.append(msg)
            continue
        if raw.get("kind") == REMINDER_KIND and (open_calls or open_turn is not None):
            held.append({"role": "assistant", "content": raw.get("content") or ""})
            continue
        close_open_calls()
        if role == "user":
            out.extend(held)  # the turn before never got its answer
            held.clear()
            open_turn = len(out)
        elif role == "assistant" and not raw.get("tool_calls"):
            open_turn = None  # this line answers the turn (or ends it, as an error or a stop)
        if raw.get("status") in ("error", "cancelled") or role not in ("user", "assistant", "system"):
            if open_turn is None:
                out.extend(held)
                held.clear()
            continue
        msg = {k: raw[k] for k in _LLM_KEYS if k in raw}
        if role == "assistant" and msg.get("tool_calls"):
            open_calls = {c["id"]: c.get("function", {}).get("name", "") for c in msg["tool_calls"]}
        if msg.get("content") is None:  # strict servers reject a tool-call message without it
            msg["content"] = ""
        out.append(msg)
        if open_turn is None:
            out.extend(held)
            held.clear()
    close_open_calls()
    if held:
        at = len(out) if open_turn is None else open_turn
        out[at:at] = held
    return out
