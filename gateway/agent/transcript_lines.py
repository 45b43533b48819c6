"""How an inbound message becomes a transcript user line, and what a line says back.

The agent loop writes the user line before the model is called (durability), and after a
crash reads it again: whether a replayed inbox entry already made it to the transcript,
whether its turn is still pending, and — for a scheduled turn — the task it came from, so
a resumed heartbeat still runs as the owner and a resumed task keeps its token budget.
"""

from __future__ import annotations

from typing import Any, Literal

from lucidgate.channels.messages import InboundMessage, ScheduledTask
from lucidgate.gateway.agent.wire_messages import INTERRUPTED_RESULT
from lucidgate.memory.sessions import Session, SessionStore

ReplayState = Literal["new", "pending", "finished"]


def user_line(msg: InboundMessage, receipt: str | None) -> dict[str, Any]:
    """The transcript line of ``msg``, with the role its gate stamped (``sender_role``), so a
    turn resumed after a restart runs as the message was admitted, not as the config says then."""
    line: dict[str, Any] = {"role": "user", "content": content(msg), "sender_id": msg.sender_id,
                            "sender_role": msg.role}
    if msg.sender_name:  # a shared chat's prompt names its speakers (``memory.speakers``)
        line["sender_name"] = msg.sender_name
    if msg.task is not None:  # all of it: a resumed turn runs as it would have (role, budget)
        line["task"] = msg.task.job
        line["task_role"] = msg.task.role
        line["task_internal"] = msg.task.internal
        if msg.task.token_budget is not None:
            line["task_budget"] = msg.task.token_budget
    if msg.message_id is not None:
        line["message_id"] = msg.message_id
    if msg.spender is not None:  # who pays, so a resumed turn spends the same guest's share
        line["spender"] = msg.spender
    if receipt is not None:
        line["inbox"] = receipt
    return line


def task_of(line: dict[str, Any]) -> ScheduledTask | None:
    """The scheduled task a transcript user line came from (older lines: job name only,
    which resumes as a guest turn without a budget — the safe reading)."""
    job = line.get("task")
    if not isinstance(job, str):
        return None
    budget = line.get("task_budget")
    return ScheduledTask(job, "owner" if line.get("task_role") == "owner" else "guest",
                         budget if isinstance(budget, int) else None, internal=line.get("task_internal") is True)


def content(msg: InboundMessage) -> str:
    if not msg.media:
        return msg.text
    missing = [m for m in msg.media if m not in msg.text]
    return "\n".join([msg.text, *(f"[attachment: {m}]" for m in missing)]).strip()


def already_persisted(transcript: list[dict[str, Any]], receipt: str | None) -> bool:
    """A replayed inbox entry whose user line made it to the transcript before the crash.

    ``transcript`` is the whole record (``SessionStore.transcript``: archived lines read back
    from the file — a lost "done" mark may belong to a line archived since), scanned newest
    first; this runs only for replayed entries.
    """
    if receipt is None:
        return False
    return any(m.get("role") == "user" and m.get("inbox") == receipt for m in reversed(transcript))


async def replayed_state(sessions: SessionStore, session: Session, receipt: str | None) -> ReplayState:
    """What became of a message replayed from the inbox: ``new`` (its user line never reached
    the transcript), ``pending`` (written, its turn never finished) or ``finished``. Lines
    archived since are read back from the file: the journal's unsynced "done" mark may have
    been lost after the turn ended and its lines were archived."""
    if not already_persisted(await sessions.transcript(session), receipt):
        return "new"
    return "pending" if still_pending(session, receipt) else "finished"


def still_pending(session: Session, receipt: str | None) -> bool:
    """The replayed message is the newest user line and its turn never finished."""
    if session.pending_state() is None:
        return False
    last_user: dict[str, Any] = next((m for m in reversed(session.messages) if m.get("role") == "user"), {})
    return last_user.get("inbox") == receipt


def answer_line(kind: str, text: str) -> dict[str, Any]:
    """The transcript line for an answer the outbox already holds (``text`` or ``error``)."""
    if kind == "error":
        return {"role": "assistant", "content": f"(no reply: {text})", "status": "error"}
    return {"role": "assistant", "content": text}


def interrupted_call_lines(session: Session) -> list[dict[str, Any]]:
    """Results for the tool calls in flight at a crash: recorded as interrupted, never re-run."""
    open_calls: dict[str, str] = {}
    for m in session.messages[session.last_consolidated:]:
        if m.get("role") == "assistant":
            open_calls = {c["id"]: c.get("function", {}).get("name", "") for c in m.get("tool_calls") or []}
        elif m.get("role") == "tool":
            open_calls.pop(str(m.get("tool_call_id")), None)
        else:
            open_calls = {}
    return [{"role": "tool", "tool_call_id": cid, "name": name, "content": INTERRUPTED_RESULT}
            for cid, name in open_calls.items()]
