"""The DingTalk channel package: everything DingTalk-specific lives here.

``build`` is the registry's factory (``channels.registry``): it refuses early, with the setting
to fix, when the section cannot work, and otherwise returns a ``DingTalkChannel``. Modules:
``settings`` (what the channel runs with), ``channel`` (lifecycle, intake), ``stream`` (the SDK's
client and our supervision of its socket), ``format`` (robot messages in, markdown out),
``send`` (session webhook or OpenAPI, parts, progress), ``openapi`` (access token, robot
sends), ``routes`` (each chat's way back, kept across restarts), ``sdk`` (logging),
``check`` (``lucid doctor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.channels.base import ChannelUnavailable
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.dingtalk.channel import DingTalkChannel
from lucidgate.channels.dingtalk.settings import DingTalkSettings

if TYPE_CHECKING:
    from lucidgate.config.schema import Config, DingTalkConfig

__all__ = ["DingTalkChannel", "DingTalkSettings", "build", "preflight"]


def preflight(section: DingTalkConfig) -> str | None:
    """Why this section cannot work (None when it can): checked before anything connects."""
    if not section.client_id.strip():
        return "no clientId (set channels.dingtalk.clientId: the app's Client ID / AppKey)"
    if not section.client_secret.get_secret_value().strip():
        return "no clientSecret (set channels.dingtalk.clientSecret: the app's Client Secret / AppSecret)"
    return None


def build(config: Config, deps: ChannelDeps) -> DingTalkChannel:
    """The registry's factory. Commands are typed as text (``/status``), so there is no menu."""
    section = config.channels.dingtalk
    reason = preflight(section)
    if reason is not None:
        raise ChannelUnavailable(reason)
    return DingTalkChannel(DingTalkSettings.from_section(section), deps.bus, workspace=deps.workspace,
                           pairing=deps.pairing)
