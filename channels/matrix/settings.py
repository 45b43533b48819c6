"""``MatrixSettings``: everything the Matrix channel reads, frozen, made from its section.

The channel takes this one value instead of a long list of parameters. ``from_section``
copies ``channels.matrix`` in (the config schema holds those defaults); the tuning fields
are not configuration — request and send waits, sync backoff, the "typing…" refresh — and
tests shorten them with ``from_section(section, retry_base_s=0.05)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lucidgate.channels.platform import PlatformSettings
from lucidgate.config.channel_schema import MatrixConfig

__all__ = ["MatrixSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixSettings(PlatformSettings):
    """What the Matrix channel runs with; ``access`` is the section the gate reads."""

    access: MatrixConfig
    homeserver: str
    user_id: str
    access_token: str
    password: str
    device_name: str
    msgtype: str
    streaming: bool
    preview_interval_s: float
    sync_timeout_s: int
    encrypted_room_notice: str
    # Tuning, not configuration (see the module docstring), beside ``PlatformSettings``'.
    request_timeout_s: float = 30.0
    typing_refresh_s: float = 25.0  # Matrix typing notices last 30 s unless refreshed

    @classmethod
    def from_section(cls, section: MatrixConfig, **tuning: Any) -> MatrixSettings:
        """The settings of ``channels.matrix``; ``tuning`` overrides the tuning fields."""
        return cls(access=section, homeserver=section.homeserver.rstrip("/"), user_id=section.user_id,
                   access_token=section.access_token.get_secret_value(),
                   password=section.password.get_secret_value(), device_name=section.device_name,
                   msgtype=section.msgtype, streaming=section.streaming,
                   preview_interval_s=section.preview_interval_s, sync_timeout_s=section.sync_timeout_s,
                   encrypted_room_notice=section.encrypted_room_notice, **tuning)
