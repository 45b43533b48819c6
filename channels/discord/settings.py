"""``DiscordSettings``: everything the Discord channel reads, frozen, made from its section.

The channel takes this one value instead of a long list of parameters. ``from_section``
copies ``channels.discord`` in (the config schema holds those defaults); the tuning fields
are not configuration — waits on Discord, backoff, the "typing…" refresh — and tests shorten
them with ``from_section(section, typing_refresh_s=0.05)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lucidgate.channels.discord.sdk import rest_base
from lucidgate.channels.platform import PlatformSettings
from lucidgate.config.channel_schema import DiscordConfig

__all__ = ["DiscordSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscordSettings(PlatformSettings):
    """What the Discord channel runs with; ``access`` is the section the gate reads."""

    access: DiscordConfig
    token: str
    api_base: str
    gateway_url: str | None
    streaming: bool
    preview_interval_s: float
    # Tuning, not configuration (see the module docstring), beside ``PlatformSettings``'.
    typing_refresh_s: float = 8.0  # one trigger shows ~10 s
    retry_max_s: float = 60.0
    heartbeat_timeout_s: float = 60.0
    connect_wait_s: float = 30.0

    @classmethod
    def from_section(cls, section: DiscordConfig, **tuning: Any) -> DiscordSettings:
        """The settings of ``channels.discord``; ``tuning`` overrides the tuning fields."""
        return cls(access=section, token=section.token.get_secret_value().strip(),
                   api_base=rest_base(section.api_base), gateway_url=section.gateway_url,
                   streaming=section.streaming, preview_interval_s=section.preview_interval_s, **tuning)
