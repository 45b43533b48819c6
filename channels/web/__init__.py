"""The web console's chat channel: a browser tab is a chat, replies stream over SSE.

``WebChannel`` is a Channel like the others (``name``/``start``/``stop``/``send``); the
console's HTTP layer (``gateway/console``) authenticates the owner and calls ``post`` and
``subscribe``. ``ChatLog`` keeps each chat's durable events with increasing ids, so a
reconnecting tab resumes from the last id it saw without losing or repeating a message.
``build`` is the registry's factory: the daemon builds the channel with the others and the
console mounts its routes (it is reachable only through a logged-in console session), so
without the console there is no web channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lucidgate.channels.base import ChannelUnavailable
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.web.channel import TurnTools, WebChannel
from lucidgate.channels.web.log import ChatEvent, ChatLog

if TYPE_CHECKING:
    from lucidgate.config.schema import Config

__all__ = ["ChatEvent", "ChatLog", "TurnTools", "WebChannel", "agent_workspaces", "build"]


def build(config: Config, deps: ChannelDeps) -> WebChannel:
    if not config.console.enabled:
        raise ChannelUnavailable("the web console is off (console.enabled)")
    return WebChannel(deps.bus, workspace=deps.workspace, turns=deps.sessions, workspaces=agent_workspaces(config),
                      default_agent=config.default_agent_id)


def agent_workspaces(config: Config) -> dict[str, Path]:
    """Each non-default agent's workspace by id (empty without ``agents.list``): where its
    web chats are kept."""
    return {agent: config.for_agent(agent).workspace for agent in config.agent_ids()
            if agent != config.default_agent_id}
