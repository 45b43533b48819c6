"""The Slack channel package: everything Slack-specific lives here.

``build`` is the registry's factory (``channels.registry``): it refuses early, naming the
setting to fix, when the section cannot work in its mode, and otherwise returns a
``SlackChannel``. Modules: ``channel`` (lifecycle, intake, replies), ``socket`` (Socket Mode
supervision), ``events`` (the HTTP Events route), ``files`` (downloads), ``format``
(mrkdwn, splitting, event parsing), ``sdk`` (token redaction, failure classification).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from channels.base import ChannelUnavailable, CommandSpec
from channels.bus import MessageBus
from channels.slack.channel import SlackChannel

if TYPE_CHECKING:
    from config.schema import Config, SlackConfig

__all__ = ["SlackChannel", "build", "preflight"]


def preflight(section: SlackConfig) -> str | None:
    """Why this section cannot work in its mode (None when it can)."""
    if not section.bot_token.get_secret_value():
        return "no botToken (set channels.slack.botToken)"
    if section.mode == "socket" and not section.app_token.get_secret_value():
        return "socket mode needs an appToken (channels.slack.appToken)"
    if section.mode == "http" and not section.signing_secret.get_secret_value():
        return "http mode needs a signingSecret (channels.slack.signingSecret)"
    return None


def build(config: Config, bus: MessageBus, *, workspace: Path,
          commands: Sequence[CommandSpec] = ()) -> SlackChannel:
    """The registry's factory. Slack's ``/lucid`` command is declared in the Slack app, so
    ``commands`` has no menu to fill here."""
    section = config.channels.slack
    reason = preflight(section)
    if reason is not None:
        raise ChannelUnavailable(reason)
    return SlackChannel(section, bus, workspace=workspace)
