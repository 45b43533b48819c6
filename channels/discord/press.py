"""Discord buttons: ``OutboundText.buttons`` out as message components, a press back as a command.

A message with buttons carries one action row whose buttons hold their command as the
``custom_id``. The view is only rendered, never listened to (it is stopped before sending, so
discord.py keeps no view per message): a press arrives as an ``INTERACTION_CREATE`` that the
channel acknowledges and hands to ``inbound_from_interaction``, which turns it into that
command sent by the *presser* — the gate admits the presser's user id, never the chat's, and
stamps the role it decided. Only commands are accepted as a ``custom_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import discord

from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.messages import ChatType, InboundMessage, Target

__all__ = ["button_view", "inbound_from_interaction", "pressed_command"]

NAME = "discord"
MAX_CUSTOM_ID = 100  # Discord's limit on a component's custom_id


def button_view(buttons: Sequence[tuple[str, str]]) -> discord.ui.View | None:
    """One row of buttons, each carrying its command; None without buttons."""
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for i, (label, command) in enumerate(buttons):
        style = discord.ButtonStyle.primary if i == 0 else discord.ButtonStyle.secondary
        view.add_item(discord.ui.Button(label=label, custom_id=command[:MAX_CUSTOM_ID], style=style))
    view.stop()  # rendered only: presses come through the channel's on_interaction
    return view


def pressed_command(interaction: discord.Interaction) -> str | None:
    """The command a button press carries; None for any other interaction."""
    data: Mapping[str, object] = interaction.data or {}
    if interaction.type is not discord.InteractionType.component or data.get("component_type") != 2:
        return None
    value = str(data.get("custom_id") or "").strip()
    return value if value.startswith("/") and len(value) <= MAX_CUSTOM_ID else None


async def inbound_from_interaction(interaction: discord.Interaction, gate: AccessGate) -> InboundMessage | None:
    """The command a press sends, admitted by the gate as the presser; None to ignore it."""
    command, presser, chat_id = pressed_command(interaction), interaction.user, interaction.channel_id
    if command is None or presser is None or presser.bot or chat_id is None:
        return None
    # A press outside any guild is in a DM with the bot: the platform's own fact.
    kind: ChatType = "private" if interaction.guild_id is None else "group"
    sender_id = str(presser.id)
    decision = await gate.admit(AccessRequest(NAME, str(chat_id), sender_id, presser.name, kind),
                                reply=Target(NAME, str(chat_id)))
    if not decision.allowed:
        return None
    return InboundMessage(channel=NAME, chat_id=str(chat_id), sender_id=sender_id, text=command, chat_type=kind,
                          message_id=f"press-{interaction.id}", sender_name=presser.display_name,
                          role=decision.role)
