"""``SlackSettings``: everything the Slack channel reads, frozen, made from its section.

The channel takes this one value instead of a section plus loose tuning parameters.
``from_section`` copies ``channels.slack`` in (the config schema holds those defaults); the
tuning fields are not configuration — the Web API timeout, the Socket Mode ping and the
reconnect backoff — and tests shorten them with ``from_section(section, ping_interval_s=1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lucidgate.config.channel_schema import SlackConfig

__all__ = ["DEFAULT_API_BASE", "SlackSettings"]

DEFAULT_API_BASE = "https://slack.com/api/"


@dataclass(frozen=True, slots=True)
class SlackSettings:
    """What the Slack channel runs with; ``access`` is the section (the gate and ``preflight``
    read it)."""

    access: SlackConfig
    bot_token: str
    app_token: str
    api_base: str
    # Tuning, not configuration (see the module docstring).
    api_timeout_s: float = 30.0
    ping_interval_s: float = 10.0
    reconnect_backoff_s: float = 1.0

    @classmethod
    def from_section(cls, section: SlackConfig, **tuning: Any) -> SlackSettings:
        """The settings of ``channels.slack``; ``tuning`` overrides the tuning fields."""
        return cls(access=section, bot_token=section.bot_token.get_secret_value().strip(),
                   app_token=section.app_token.get_secret_value().strip(),
                   api_base=section.api_base or DEFAULT_API_BASE, **tuning)
