"""The webhook's sessions API: list, read and reset webhook sessions (``/v1/sessions…``).

The admin token sees every webhook session; the owner token the owner's chats and the ones
it wrote to; the integration token only the guest chats it wrote to (``channels.webhook.auth``). Kept apart from the channel, which it reaches through the
small ``SessionsHost`` surface, so each module holds one idea.

Several agents: each agent's webhook sessions are its own (keys ``webhook:<chat>`` for the
default agent, ``<agent>:webhook:<chat>`` for another). ``?agent=<id>`` chooses the agent
(absent: the default agent); a key that starts with another agent's id names that agent by
itself, so the ``session`` a reply carries can be read back as it is. A key is looked up
in its agent's sessions only; an agent's key asked under another agent is not found.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import Role
from lucidgate.channels.webhook.api import (
    CHANNEL,
    SHUTTING_DOWN,
    AUTH_ERRORS,
    MessageAccepted,
    MessageReply,
    SessionDetail,
    SessionList,
    SessionSummary,
    SessionsView,
    doc,
    error_response,
)
from lucidgate.channels.webhook.auth import LIST_SCAN_LIMIT, SESSION_403, ChatLedger, Credential, may_read, unwritten_refusal
from lucidgate.channels.webhook.intake import MessageIntake
from lucidgate.config.schema import WebhookConfig


class SessionsHost(Protocol):
    """What the sessions API needs from the webhook channel."""

    cfg: WebhookConfig
    bus: MessageBus
    ledger: ChatLedger

    @property
    def sessions_view(self) -> SessionsView | None: ...

    def caller_of(self, request: Request) -> tuple[Credential, str]: ...

    @property
    def intake(self) -> MessageIntake: ...

    def admit(self, request: Request, sender_id: str) -> Role | Response: ...


class SessionsApi:
    def __init__(self, channel: SessionsHost) -> None:
        self.ch = channel

    def register(self, router: APIRouter) -> None:
        router.add_api_route("/sessions", self.list_sessions, methods=["GET"], response_model=SessionList,
                             summary="List webhook sessions (the integration token: only its own chats)",
                             responses=dict(AUTH_ERRORS))
        router.add_api_route("/sessions/{key:path}", self.get_session, methods=["GET"],
                             response_model=SessionDetail, summary="Recent messages of a session",
                             responses={**AUTH_ERRORS, 403: doc(SESSION_403), 404: doc("No such webhook session.")})
        router.add_api_route(
            "/sessions/{key:path}", self.reset_session, methods=["DELETE"], response_model=MessageReply,
            summary="Start the session afresh (/new), in order with its turns",
            responses={**AUTH_ERRORS, 202: doc("Queued (wait=false).", MessageAccepted),
                       403: doc(SESSION_403), 404: doc("No such webhook session."),
                       504: doc("Not done within waitTimeoutS; it still runs.")})

    async def list_sessions(self, request: Request,
                             limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                             agent: Annotated[str | None, Query(max_length=64, description=AGENT_HELP)] = None,
                             ) -> Response:
        if self.ch.sessions_view is None:
            return error_response(503, "session listing is not available in this process")
        chosen = agent_view(self.ch.sessions_view, agent or "")
        if isinstance(chosen, Response):
            return chosen
        view, prefix = chosen
        kind, token_fp = self.ch.caller_of(request)
        if kind == "admin":
            items = await view.list(prefix, limit)
        else:  # the chats this token may read, newest first like the rest
            mine = await asyncio.to_thread(self.ch.ledger.chats_of, token_fp)
            roles = await asyncio.to_thread(self.ch.ledger.roles)
            readable = {c for c in mine | set(roles)
                        if may_read(kind, wrote=c in mine, role=roles.get(c))}
            everything = await view.list(prefix, LIST_SCAN_LIMIT) if readable else []
            items = [i for i in everything if str(i.get("chat_id")) in readable][:limit]
        return JSONResponse(SessionList(sessions=[SessionSummary(**i) for i in items]).model_dump())

    async def get_session(self, key: str, request: Request,
                           limit: Annotated[int, Query(ge=1, le=500)] = 20,
                           agent: Annotated[str | None, Query(max_length=64, description=AGENT_HELP)] = None,
                           ) -> Response:
        found = await self._session(key, limit, request, agent)
        if isinstance(found, Response):
            return found
        return JSONResponse(SessionDetail(**found.detail).model_dump())

    async def reset_session(self, key: str, request: Request, wait: bool = True,
                             sender_id: Annotated[str, Query(min_length=1, max_length=256)] = "webhook-api",
                             agent: Annotated[str | None, Query(max_length=64, description=AGENT_HELP)] = None,
                             ) -> Response:
        found = await self._session(key, 1, request, agent)
        if isinstance(found, Response):
            return found
        role = self.ch.admit(request, sender_id)
        if isinstance(role, Response):
            return role
        if not self.ch.bus.accepting:
            return error_response(503, SHUTTING_DOWN)
        return await self.ch.intake.submit(request, found.chat_id, sender_id, "/new", role=role, idem_key=None,
                                           callback_url=None, wait=wait, agent=found.agent)

    async def _session(self, key: str, limit: int, request: Request, agent: str | None) -> _Found | Response:
        """The session ``key`` of the agent named (or, unnamed, the one its key starts with)."""
        if self.ch.sessions_view is None:
            return error_response(503, "session access is not available in this process")
        named = agent if agent is not None else key_agent(self.ch.sessions_view, key)
        chosen = agent_view(self.ch.sessions_view, named)
        if isinstance(chosen, Response):
            return chosen
        view, prefix = chosen
        if not key.startswith(prefix) or key == prefix:
            return error_response(404, f"no webhook session {key!r} (keys look like '{prefix}<chat_id>')")
        detail = await view.recent(key, limit)
        if detail is None:
            return error_response(404, f"no webhook session {key!r}")
        kind, token_fp = self.ch.caller_of(request)
        chat_id = key.removeprefix(prefix)
        if not await asyncio.to_thread(_may_read, self.ch.ledger, kind, token_fp, chat_id):
            return error_response(403, unwritten_refusal(key, bool(self.ch.cfg.admin_token.get_secret_value())))
        return _Found(detail, named, chat_id)


@dataclass(frozen=True, slots=True)
class _Found:
    """A session the caller may read: its detail, its agent's id ("": the default) and chat."""

    detail: dict[str, Any]
    agent: str
    chat_id: str


AGENT_HELP = "the agent's id (agents.list); absent: the default agent, or the agent a key starts with"


def agent_view(view: SessionsView, agent: str) -> tuple[SessionsView, str] | Response:
    """The transcripts of ``agent`` ("": the default agent) and its webhook keys' prefix, or
    a 404 naming the agents for an unknown id."""
    found = view.for_agent(agent)
    if found is None:
        return error_response(404, f"no agent {agent[:64]!r}; the agents are: "
                                   f"{', '.join([view.default, *view.agents])}")
    stamp = "" if found is view else agent
    return found, f"{stamp}:{CHANNEL}:" if stamp else f"{CHANNEL}:"


def key_agent(view: SessionsView, key: str) -> str:
    """The agent a session key names: another agent's id before ``:webhook:``, else ""."""
    head, _, rest = key.partition(":")
    return head if head in view.agents and rest.startswith(f"{CHANNEL}:") else ""


def _may_read(ledger: ChatLedger, kind: Credential, token_fp: str, chat_id: str) -> bool:
    if kind == "admin":
        return True
    return may_read(kind, wrote=ledger.wrote(token_fp, chat_id), role=ledger.role_of(chat_id))
