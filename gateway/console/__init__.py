"""The web console: static pages at ``/``, an owner-only JSON API under ``/api/console``.

``mount_console(app, gateway, agents, version=...)`` is all the HTTP app calls: it adds the
routers, the security headers and the static files, handing each route module its share of
each agent's ``ConsoleParts`` (chosen by the composition root), per agent in a ``PerAgent``:
a request names its agent with ``?agent=<id>`` (absent: the default agent) and a route
reads only that agent's parts. ``GET /api/console/agents`` lists them for the page's picker.
The web chat channel is the gateway's (built with the others by the composition root);
without it (``channels.web`` off) the console has no chat. Nothing here runs at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, Field

from lucidgate.channels.web import WebChannel
from lucidgate.gateway.console.auth import ConsoleAuth
from lucidgate.gateway.console.context import REFUSALS, TAG, ConsoleContext, PerAgent, owner_dependency
from lucidgate.gateway.console.links import LoginLinks

if TYPE_CHECKING:
    from lucidgate.gateway.runtime import ConsoleAgents, ConsoleParts, Gateway

__all__ = ["ConsoleContext", "mount_console"]


class AgentInfo(BaseModel):
    id: str
    default: bool
    workspace: str = Field(description="the agent's workspace folder")
    model: str


def mount_console(app: FastAPI, gateway: Gateway, agents: ConsoleAgents, *, version: str) -> ConsoleContext | None:
    """Mount the console unless ``console.enabled`` is false; returns its context."""
    from lucidgate.gateway.console.security import ConsoleBodyCap, ConsoleHeaders
    from lucidgate.gateway.console.assets import add_static_routes

    config = agents.default.config
    if not config.console.enabled:
        return None

    web = gateway.channel("web")
    chat = web if isinstance(web, WebChannel) else None
    auth = ConsoleAuth(token=config.console.token.get_secret_value(), links=LoginLinks(config.workspace),
                       ttl_s=config.console.session_ttl_h * 3600)
    ctx = ConsoleContext(auth=auth, web=chat, version=version)
    app.state.console = ctx
    app.add_middleware(ConsoleHeaders)
    app.add_middleware(ConsoleBodyCap)
    for api in _routers(auth, gateway, PerAgent(agents.by_id), chat, version=version, started=ctx.started):
        app.include_router(api)
    add_static_routes(app)
    return ctx


def _routers(auth: ConsoleAuth, gateway: Gateway, each: PerAgent[ConsoleParts], chat: WebChannel | None, *,
             version: str, started: float) -> list[APIRouter]:
    """Each route module gets the owner check and, per agent, only the parts it reads."""
    from lucidgate.gateway.console import (
        api_approvals,
        api_auth,
        api_chat,
        api_dream,
        api_forget,
        api_history,
        api_memory,
        api_ops,
        api_sessions,
    )

    default = each.get(None)
    routers = [api_auth.router(auth), _agents_router(auth, each)]
    if default.approvals is not None:
        held = each.map(lambda p: (p.approvals, p.config.workspace))
        routers.append(api_approvals.router(auth, agents=held))  # type: ignore[arg-type]
    if chat is not None:
        routers.append(api_chat.router(auth, chat, agents=each.map(lambda p: api_chat.ChatParts(p.commands, p.stamp))))
        several = len(each.items) > 1  # then even the default agent's /new names its agent
        routers.append(api_sessions.router(auth, web=chat, bus=default.bus, agents=PerAgent({
            agent_id: api_sessions.SessionsParts(p.config, p.sessions, p.usage, p.stamp,
                                                 pin=agent_id if several else "")
            for agent_id, p in each.items.items()})))
    routers += [
        api_memory.router(auth, agents=each.map(lambda p: api_memory.MemoryParts(p.config.workspace, p.git, p.recall))),
        api_history.router(auth, agents=each.map(lambda p: (p.config.workspace, f"{p.stamp}:" if p.stamp else ""))),
        api_dream.router(auth, agents=each.map(lambda p: api_dream.DreamParts(p.git, p.dream, p.store))),
        api_forget.router(auth, agents=each.map(lambda p: api_forget.ForgetParts(
            p.dream, p.store, p.git, p.sessions, p.recall, [p.config.workspace.parent]))),
        api_ops.router(auth, agents=each.map(lambda p: api_ops.OpsParts(
            p.config.agent, p.scheduler, p.dream, p.usage, p.model, p.store, p.agent, p.stamp)),
            bus=default.bus, gateway=gateway, version=version, started=started),
    ]
    return routers


def _agents_router(auth: ConsoleAuth, each: PerAgent[ConsoleParts]) -> APIRouter:
    api = APIRouter(prefix="/api/console", tags=[TAG], dependencies=[owner_dependency(auth)], responses=REFUSALS)

    @api.get("/agents", response_model=list[AgentInfo], summary="The agents, the default first")
    async def agents() -> list[AgentInfo]:
        return [AgentInfo(id=agent_id, default=agent_id == each.default, workspace=str(p.config.workspace),
                          model=p.config.agent.model) for agent_id, p in each.items.items()]

    return api
