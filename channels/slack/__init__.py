"""The Slack channel package: everything Slack-specific lives here.

``build`` is the registry's factory (``channels.registry``); it refuses with
``ChannelUnavailable`` naming the setting to fix (``preflight``) when the section cannot work
in its mode. Modules: ``settings`` (what the channel runs with), ``channel`` (lifecycle,
intake, replies), ``socket`` (Socket Mode
supervision), ``events`` (the HTTP Events route), ``files`` (downloads), ``format``
(replies as markdown blocks, event parsing), ``press`` (buttons out, presses in as the
presser's commands), ``sdk`` (token redaction, failure classification).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.slack.channel import SlackChannel, preflight
from lucidgate.channels.slack.settings import SlackSettings

if TYPE_CHECKING:
    from lucidgate.config.schema import Config

__all__ = ["SlackChannel", "SlackSettings", "build", "preflight"]


def build(config: Config, deps: ChannelDeps) -> SlackChannel:
    """The registry's factory. Slack's ``/lucid`` command is declared in the Slack app, so
    ``deps.commands`` has no menu to fill here."""
    return SlackChannel(SlackSettings.from_section(config.channels.slack), deps.bus, workspace=deps.workspace,
                        pairing=deps.pairing)
