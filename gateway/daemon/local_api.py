"""The terminal's way into a running gateway: ``lucid agent`` beside ``lucid gateway``.

When the daemon runs, ``lucid agent`` should not start a second agent on the same
workspace (two writers of one transcript, a second copy of every job) nor pay seconds of
``import litellm`` per message. Instead the gateway serves the terminal channel on
``POST /v1/local/messages`` (and answers ``lucid memory search`` on ``POST /v1/local/search``
from its warm index) and publishes where to reach it in ``state/local.json``
(mode 0600: whoever can read the workspace is the owner anyway). The token in that file is
new on every start, so a stale file only ever leads to a refused or failed connection, and
the CLI then falls back to running the agent in-process.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from lucidgate.channels.bus import BusClosed, BusFull
from lucidgate.channels.cli import CliChannel
from lucidgate.channels.webhook.api import guarded_route
from lucidgate.config.agents_schema import AGENT_ID
from lucidgate.gateway.daemon.local_client import SESSION_NAME_PATTERN

if TYPE_CHECKING:
    from lucidgate.gateway.runtime import Gateway, GatewayParts

logger = logging.getLogger(__name__)

MAX_LOCAL_CHARS = 1_000_000
MAX_LOCAL_BODY_BYTES = 4 * MAX_LOCAL_CHARS + 1024  # JSON-escaped text may take up to ~4 bytes a char


class LocalMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_LOCAL_CHARS)
    session: str | None = Field(None, pattern=SESSION_NAME_PATTERN,
                                description="The terminal session to talk in (`lucid agent -s NAME`).")
    agent: str | None = Field(None, pattern=AGENT_ID,
                              description="The agent to talk to (`lucid agent --agent ID`); none: the bindings decide.")


class LocalReply(BaseModel):
    ok: bool = Field(description="False when the turn failed; `reply` then says why.")
    reply: str


class LocalError(BaseModel):
    detail: str


def new_token() -> str:
    return secrets.token_urlsafe(32)


GUARD_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": LocalError, "description": "Missing or wrong local token."},
    413: {"model": LocalError, "description": "The body is over the limit."},
}


def local_router(token: str, max_body_bytes: int) -> APIRouter:
    """A router whose routes check the local token, then cap the body as it streams, before
    anything is parsed (the webhook's guarded route class). Every ``/v1/local/*`` route uses it."""
    expected = f"Bearer {token}".encode()

    def authorize(header: str | None) -> Response | None:
        if header and hmac.compare_digest(header.encode(), expected):
            return None
        return JSONResponse({"detail": "missing or wrong local token (see state/local.json)"}, 401)

    return APIRouter(route_class=guarded_route(authorize, lambda: max_body_bytes))


def add_local_route(app: FastAPI, cli: CliChannel, token: str, agents: Sequence[str] = ()) -> None:
    """Mount ``POST /v1/local/messages`` (``lucid agent``); ``/v1/local/search`` lives in
    ``gateway.daemon.local_search``. ``agents``: the ids this gateway serves, the default first."""
    router = local_router(token, MAX_LOCAL_BODY_BYTES)
    served = tuple(agents)

    @router.post("/v1/local/messages", response_model=LocalReply, tags=["local"],
                 summary="The terminal channel of a running gateway (used by `lucid agent`)",
                 responses={**GUARD_RESPONSES,
                            404: {"model": LocalError, "description": "No such agent here."},
                            503: {"model": LocalError, "description": "Shutting down or busy; retry."}})
    async def local_message(body: LocalMessage) -> Any:
        agent = body.agent
        if agent is not None and agent not in served:
            # Published, it would wait in a queue no agent reads: refuse it now instead.
            known = ", ".join(served) or "none"
            return JSONResponse({"detail": f"this gateway serves no agent {agent!r} (its agents: {known}); "
                                           "restart it after changing agents.list"}, 404)
        # The one agent of a gateway without agents.list is reached by the bindings-free default.
        pinned = agent if agent is not None and len(served) > 1 else None
        try:
            ok, reply = await cli.ask(body.text, body.session, agent=pinned)
        except (BusClosed, BusFull) as exc:
            return JSONResponse({"detail": str(exc)}, 503)
        return LocalReply(ok=ok, reply=reply)

    app.include_router(router)


class LocalAgent(BaseModel):
    id: str
    default: bool
    workspace: str
    model: str = Field(description="The model the agent is configured with (a session may have switched its own).")
    alive: bool = Field(description="Whether the agent's loop runs.")
    active_turns: int
    queued: int


class LocalAgents(BaseModel):
    agents: list[LocalAgent] = Field(description="Every agent this gateway serves, the default first.")


def add_local_agents(app: FastAPI, gateway: Gateway, token: str) -> None:
    """Mount ``GET /v1/local/agents``: the agents the running gateway serves and what each is
    doing (``lucid status``), as the process sees them, which may differ from a config edited
    since it started. While it drains (shutting down) it answers 503: its agents are stopping."""
    router = local_router(token, 0)
    agents: Mapping[str, GatewayParts] = gateway.agents

    @router.get("/v1/local/agents", response_model=LocalAgents, tags=["local"],
                summary="The agents of a running gateway (used by `lucid status`)",
                responses={**GUARD_RESPONSES, 503: {"model": LocalError, "description": "Shutting down."}})
    async def local_agents() -> Any:
        if gateway.draining:
            return JSONResponse({"detail": "the gateway is shutting down"}, 503)
        return LocalAgents(agents=[
            LocalAgent(id=agent_id, default=n == 0, workspace=str(parts.config.workspace),
                       model=parts.config.agent.model, alive=parts.agent.alive()[0],
                       active_turns=parts.agent.active_turns, queued=parts.agent.queued)
            for n, (agent_id, parts) in enumerate(agents.items())])

    app.include_router(router)
