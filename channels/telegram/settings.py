"""``TelegramSettings``: everything the Telegram channel reads, frozen, made from its section.

The channel and its poller take this one value instead of a long list of parameters. The
settings from ``channels.telegram`` are copied in by ``from_section`` (the config schema
holds their defaults); the tuning below is not configuration — how long to wait on
Telegram, how fast to back off, how often to refresh "typing…" — and tests shorten it with
``from_section(section, retry_base_s=0.02)``. The webhook secret is derived from the token
when none is configured, so a restart keeps the same secret.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from lucidgate.channels.platform import PlatformSettings
from lucidgate.config.channel_schema import TelegramConfig

__all__ = ["DEFAULT_API_BASE", "TelegramSettings"]

DEFAULT_API_BASE = "https://api.telegram.org"


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramSettings(PlatformSettings):
    """What the Telegram channel runs with; ``access`` is the section the gate reads."""

    access: TelegramConfig
    token: str
    api_base: str
    webhook_url: str | None
    webhook_secret: str
    streaming: bool
    poll_timeout_s: float
    watchdog_s: float
    # Tuning, not configuration (see the module docstring), beside ``PlatformSettings``'.
    preview_interval_s: float = 1.0
    request_timeout_s: float = 10.0

    @classmethod
    def from_section(cls, section: TelegramConfig, **tuning: Any) -> TelegramSettings:
        """The settings of ``channels.telegram``; ``tuning`` overrides the tuning fields."""
        token = section.token.get_secret_value()
        hook = section.webhook
        secret = hook.secret_token.get_secret_value() if hook else ""
        return cls(
            access=section, token=token, api_base=(section.api_base or DEFAULT_API_BASE).rstrip("/"),
            webhook_url=hook.url if hook and hook.url else None,
            webhook_secret=secret or hmac.new(token.encode(), b"lucidgate-telegram-webhook",
                                              hashlib.sha256).hexdigest(),
            streaming=section.streaming, poll_timeout_s=section.poll_timeout_s, watchdog_s=section.watchdog_s,
            **tuning,
        )
