"""``DingTalkSettings``: everything the DingTalk channel reads, frozen, made from its section.

``from_section`` copies ``channels.dingtalk`` in (the config schema holds those defaults); the
tuning fields are not configuration — HTTP timeouts, the wait for a new stream, the websocket ping, reconnect backoff, how
close to its expiry a session webhook is no longer trusted — and tests shorten them with
``from_section(section, ping_interval_s=0.05)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lucidgate.config.channel_schema import DingTalkConfig

__all__ = ["DEFAULT_API_BASE", "DingTalkSettings"]

DEFAULT_API_BASE = "https://api.dingtalk.com"


@dataclass(frozen=True, slots=True)
class DingTalkSettings:
    """What the DingTalk channel runs with; ``access`` is the section the gate reads."""

    access: DingTalkConfig
    client_id: str
    client_secret: str
    robot_code: str
    api_base: str
    progress_text: str | None
    watchdog_s: float
    # Tuning, not configuration (see the module docstring).
    api_timeout_s: float = 15.0
    connect_timeout_s: float = 30.0
    ping_interval_s: float = 20.0
    reconnect_backoff_s: float = 1.0
    max_backoff_s: float = 120.0
    webhook_margin_s: float = 60.0

    @classmethod
    def from_section(cls, section: DingTalkConfig, **tuning: Any) -> DingTalkSettings:
        """The settings of ``channels.dingtalk``; ``tuning`` overrides the tuning fields."""
        client_id = section.client_id.strip()
        progress = section.progress_text.strip() if section.progress_text else None
        return cls(access=section, client_id=client_id,
                   client_secret=section.client_secret.get_secret_value().strip(),
                   robot_code=section.robot_code.strip() or client_id,
                   api_base=(section.api_base or DEFAULT_API_BASE).rstrip("/"),
                   progress_text=progress or None, watchdog_s=section.watchdog_s, **tuning)
