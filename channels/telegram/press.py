"""Inline-button presses (``callback_query`` updates) as commands from whoever pressed.

A button the gateway sent carries a command (``OutboundText.buttons``); pressing it sends
that command as the *presser*: the gate admits the presser's user id, never the chat's, and
stamps the role it decided — so a button that reaches someone else (a forwarded message, a
group) acts with their role, not the owner's. Only commands are accepted as button data.
"""

from __future__ import annotations

from telegram import CallbackQuery

from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.messages import ChatType, InboundMessage, Target

NAME = "telegram"
MAX_DATA = 64  # Telegram's limit on callback data


async def inbound_from_press(query: CallbackQuery, gate: AccessGate, *,
                            account: str | None = None) -> InboundMessage | None:
    """The command a press sends, admitted by the gate as the presser; None to ignore it.
    ``account`` is the bot's (``InboundMessage.account``)."""
    presser, message, data = query.from_user, query.message, (query.data or "").strip()
    if presser is None or presser.is_bot or message is None or not data.startswith("/") or len(data) > MAX_DATA:
        return None
    chat = message.chat
    if chat.type not in ("private", "group", "supergroup"):
        return None
    kind: ChatType = "private" if chat.type == "private" else "group"
    sender_id, chat_id = str(presser.id), str(chat.id)
    decision = await gate.admit(AccessRequest(NAME, chat_id, sender_id, presser.username, kind),
                                reply=Target(NAME, chat_id))
    if not decision.allowed:
        return None
    return InboundMessage(channel=NAME, chat_id=chat_id, sender_id=sender_id, text=data, chat_type=kind,
                          message_id=f"press-{query.id}", sender_name=presser.full_name or presser.username,
                          role=decision.role, account=account)
