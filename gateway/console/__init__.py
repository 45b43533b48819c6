"""The web console: static pages at ``/``, an owner-only JSON API under ``/api/console``.

``mount_console(app, gateway, parts, version=...)`` is all the HTTP app calls: it adds the
routers, the security headers and the static files, handing each route module its share of
the ``ConsoleParts`` the composition root chose. The web chat channel is the
gateway's (built with the others by the composition root); without it (``channels.web``
off) the console has no chat. Nothing here runs at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from lucidgate.channels.web import WebChannel
from lucidgate.gateway.console.auth import ConsoleAuth
from lucidgate.gateway.console.context import ConsoleContext
from lucidgate.gateway.console.links import LoginLinks

if TYPE_CHECKING:
    from lucidgate.gateway.runtime import ConsoleParts, Gateway

__all__ = ["ConsoleContext", "mount_console"]


def mount_console(app: FastAPI, gateway: Gateway, p: ConsoleParts, *, version: str) -> ConsoleContext | None:
    """Mount the console unless ``console.enabled`` is false; returns its context."""
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
    from lucidgate.gateway.console.security import ConsoleBodyCap, ConsoleHeaders
    from lucidgate.gateway.console.assets import add_static_routes

    config = p.config
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
    workspace = config.workspace
    # Each route module gets the owner check and only the parts it reads.
    chat_routes = () if chat is None else (
        api_chat.router(auth, chat, p.commands),
        api_sessions.router(auth, config=config, web=chat, store=p.sessions, usage=p.usage, bus=p.bus),
    )
    held = () if p.approvals is None else (api_approvals.router(auth, approvals=p.approvals, workspace=workspace),)
    for api in (
        api_auth.router(auth),
        *held,
        *chat_routes,
        api_memory.router(auth, workspace=workspace, git=p.git, recall=p.recall),
        api_history.router(auth, workspace=workspace),
        api_dream.router(auth, git=p.git, dream=p.dream, store=p.store),
        api_forget.router(auth, dream=p.dream, store=p.store, git=p.git, sessions=p.sessions, recall=p.recall,
                          backup_dirs=[workspace.parent]),
        api_ops.router(auth, agent=config.agent, scheduler=p.scheduler, dream=p.dream, ledger=p.usage, bus=p.bus,
                       model=p.model, store=p.store, turns=p.agent, gateway=gateway, version=version,
                       started=ctx.started),
    ):
        app.include_router(api)
    add_static_routes(app)
    return ctx
