"""The Discord channel package: everything Discord-specific lives here.

``build`` is the registry's factory (``channels.registry``): it refuses early, with the
setting to fix, when the section cannot work, and otherwise returns a ``DiscordChannel``.
Modules: ``settings`` (what the channel runs with), ``channel`` (lifecycle, intake), ``send``
(replies, streaming edits, typing, files), ``press`` (buttons out, presses in as the presser's
commands), ``format`` (Discord markdown, mentions), ``files`` (attachments in), ``sdk`` (discord.py
setup: intents, REST root and Gateway URL), ``check`` (``lucid doctor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.channels.base import refuse_if
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.discord.channel import DiscordChannel
from lucidgate.channels.discord.settings import DiscordSettings

if TYPE_CHECKING:
    from lucidgate.config.schema import Config, DiscordConfig

__all__ = ["DiscordChannel", "DiscordSettings", "build", "preflight"]


def preflight(section: DiscordConfig) -> str | None:
    """Why this section cannot work (None when it can): checked before anything connects."""
    return None if section.token.get_secret_value().strip() else "no token (set channels.discord.token)"


def build(config: Config, deps: ChannelDeps) -> DiscordChannel:
    """The registry's factory. Commands are typed as text (``/status``), so there is no menu."""
    section = config.channels.discord
    refuse_if(preflight(section))
    return DiscordChannel(DiscordSettings.from_section(section), deps.bus, workspace=deps.workspace,
                          pairing=deps.pairing)
