"""What the owner and the model read about a held action.

The owner's request shows the exact action (tool and canonical arguments) and why it was held:
the untrusted source, its first words quoted as material (``> ``), control characters gone, so
the owner decides knowing what was in the turn. It is sent as plain text: nothing in it renders
as markup or a link preview of the attacker's choosing.
"""

from __future__ import annotations

from collections.abc import Callable

from lucidgate.gateway.approvals.store import ApprovalRequest
from lucidgate.gateway.approvals.taint import CONTROL, quoted

MAX_ACTION_CHARS = 1500
MAX_RESULT_CHARS = 2000


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def owner_prompt(request: ApprovalRequest, timeout_s: float,
                 command: Callable[[str], str] = lambda c: f"/{c}") -> str:
    """What the owner reads; ``command`` spells a command the way the owner's channel takes it."""
    # Visible escapes for what could hide text (bidi overrides, zero-width): the owner sees all.
    action = CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", request.action())
    if len(action) > MAX_ACTION_CHARS:
        action = action[:MAX_ACTION_CHARS] + f" …[{len(action) - MAX_ACTION_CHARS} more characters]"
    lines = [
        f"Approval needed — id {request.id}",
        f"A turn in {request.session_key} ({request.chat_type}) asked to run:",
        f"  {action}",
        f"Held because that turn had read words that are not yours: {quoted(request.origin, 300)}",
    ]
    if request.quote:
        lines.append(f"> {request.quote}")
    lines += [
        f"{command(f'approve {request.id}')} runs exactly this, once. "
        f"{command(f'deny {request.id}')} refuses it.",
        f"Unanswered, it is denied in {_minutes(timeout_s)}.",
    ]
    return "\n".join(lines)


def held_note(request: ApprovalRequest) -> str:
    """The tool result the model reads instead of an outcome."""
    return (f"Held for the owner's approval (id {request.id}): {request.tool} was NOT run. This turn "
            "contains words that are not the owner's, so owner-power actions wait for the owner, who "
            "has been asked privately. Do not retry it; tell the user it awaits the owner's approval. "
            "The outcome will arrive in this chat as a note.")


def result_text(output: str) -> str:
    text = output.strip() or "(no output)"
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "…[cut]"
