"""The Telegram channel package: everything Telegram-specific lives here.

``build`` is the registry's factory (``channels.registry``): it refuses early, with the
setting to fix, when the section cannot work, and otherwise returns a ``TelegramChannel``.
Modules: ``settings`` (what the channel runs with), ``channel`` (lifecycle, intake, media),
``poll`` (long polling), ``webhook`` (the webhook route), ``send`` (outbound delivery, flood
limits), ``markdown`` (replies as Telegram HTML, written from markdown-it tokens), ``format``
(mentions, commands, media).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.channels.base import refuse_if
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.telegram.channel import TelegramChannel
from lucidgate.channels.telegram.settings import TelegramSettings

if TYPE_CHECKING:
    from lucidgate.config.schema import Config, TelegramConfig

__all__ = ["TelegramChannel", "TelegramSettings", "build", "preflight"]


def preflight(section: TelegramConfig) -> str | None:
    """Why this section cannot work (None when it can): checked before anything connects."""
    return None if section.token.get_secret_value() else "no token (set channels.telegram.token)"


def build(config: Config, deps: ChannelDeps) -> TelegramChannel:
    """The registry's factory; ``deps.commands`` become the bot's command menu."""
    section = config.channels.telegram
    refuse_if(preflight(section))
    return TelegramChannel(TelegramSettings.from_section(section), deps.bus, workspace=deps.workspace,
                           commands=deps.commands, pairing=deps.pairing)
