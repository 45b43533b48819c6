"""Slack buttons: ``OutboundText.buttons`` out as Block Kit, a press back as a command.

A message with buttons is posted as ``section`` blocks holding its text (as written) and one
``actions`` block of buttons whose ``value`` is the command each sends. A press arrives as a
``block_actions`` interaction; ``inbound_from_action`` turns it into that command sent by the
*presser*: the gate admits the presser's user id, never the chat's, and stamps the role it
decided — so a button that reaches someone else acts with their role, not the owner's. Only
our own buttons (``ACTION_ID``) and only commands are accepted as values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, PlainTextObject, SectionBlock

from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.messages import ChatType, InboundMessage, Target

__all__ = ["ACTION_ID", "SECTION_CHARS", "with_buttons", "inbound_from_action"]

NAME = "slack"
ACTION_ID = re.compile(r"^lucid_press_\d+$")  # the listener's filter; other apps' actions are not ours
SECTION_CHARS = 3000  # Slack's limit on a section's text
MAX_VALUE = 2000  # Slack's limit on a button's value


def with_buttons(fields: dict[str, Any], buttons: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``chat.postMessage`` fields with a row of buttons under the message. Plain text (no
    blocks yet, at most ``SECTION_CHARS``) moves into a ``section`` block; ``text`` stays the
    notification fallback."""
    if not buttons:
        return fields
    row = [ButtonElement(text=label, action_id=f"lucid_press_{i}", value=command,
                         style="primary" if i == 0 else None).to_dict()
           for i, (label, command) in enumerate(buttons)]
    blocks = list(fields.get("blocks") or
                  [SectionBlock(text=PlainTextObject(text=fields["text"], emoji=False)).to_dict()])
    return {**fields, "blocks": [*blocks, ActionsBlock(elements=row).to_dict()]}


async def inbound_from_action(body: dict[str, Any], gate: AccessGate) -> InboundMessage | None:
    """The command a press sends, admitted by the gate as the presser; None to ignore it."""
    user, channel = body.get("user") or {}, body.get("channel") or {}
    actions = [a for a in body.get("actions") or () if isinstance(a, dict)]
    if not isinstance(user, dict) or not isinstance(channel, dict) or len(actions) != 1:
        return None
    sender_id, chat_id = str(user.get("id") or ""), str(channel.get("id") or "")
    action, value = actions[0], str(actions[0].get("value") or "").strip()
    if not sender_id or not chat_id or action.get("type") != "button" \
            or not ACTION_ID.match(str(action.get("action_id") or "")) \
            or not value.startswith("/") or len(value) > MAX_VALUE:
        return None
    # "D…" is a direct message with the app: the platform's own fact, as for /lucid.
    kind: ChatType = "private" if chat_id.startswith("D") else "group"
    container = body.get("container")
    thread = _text(container.get("thread_ts")) if kind == "group" and isinstance(container, dict) else None
    decision = await gate.admit(AccessRequest(NAME, chat_id, sender_id, _text(user.get("username")), kind),
                                reply=Target(NAME, chat_id, thread))
    if not decision.allowed:
        return None
    press = str(action.get("action_ts") or body.get("trigger_id") or "")
    return InboundMessage(channel=NAME, chat_id=chat_id, sender_id=sender_id, text=value, chat_type=kind,
                          thread_id=thread, message_id=f"press-{press}" if press else None,
                          sender_name=_text(user.get("name")) or _text(user.get("username")),
                          role=decision.role)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
