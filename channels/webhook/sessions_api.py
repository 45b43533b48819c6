"""The webhook's sessions API: list, read and reset webhook sessions (``/v1/sessions…``).

The admin token sees every webhook session; the owner token the owner's chats and the ones
it wrote to; the integration token only the guest chats it wrote to (``channels.webhook.auth``). Kept apart from the channel, which it reaches through the
small ``SessionsHost`` surface, so each module holds one idea.
"""

from __future__ import annotations

import asyncio
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
                             limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
        if self.ch.sessions_view is None:
            return error_response(503, "session listing is not available in this process")
        kind, token_fp = self.ch.caller_of(request)
        if kind == "admin":
            items = await self.ch.sessions_view.list(f"{CHANNEL}:", limit)
        else:  # the chats this token may read, newest first like the rest
            mine = await asyncio.to_thread(self.ch.ledger.chats_of, token_fp)
            roles = await asyncio.to_thread(self.ch.ledger.roles)
            readable = {c for c in mine | set(roles)
                        if may_read(kind, wrote=c in mine, role=roles.get(c))}
            everything = await self.ch.sessions_view.list(f"{CHANNEL}:", LIST_SCAN_LIMIT) if readable else []
            items = [i for i in everything if str(i.get("chat_id")) in readable][:limit]
        return JSONResponse(SessionList(sessions=[SessionSummary(**i) for i in items]).model_dump())

    async def get_session(self, key: str, request: Request,
                           limit: Annotated[int, Query(ge=1, le=500)] = 20) -> Response:
        detail = await self._session(key, limit, request)
        if isinstance(detail, Response):
            return detail
        return JSONResponse(SessionDetail(**detail).model_dump())

    async def reset_session(self, key: str, request: Request, wait: bool = True,
                             sender_id: Annotated[str, Query(min_length=1, max_length=256)] = "webhook-api",
                             ) -> Response:
        found = await self._session(key, 1, request)
        if isinstance(found, Response):
            return found
        role = self.ch.admit(request, sender_id)
        if isinstance(role, Response):
            return role
        if not self.ch.bus.accepting:
            return error_response(503, SHUTTING_DOWN)
        return await self.ch.intake.submit(request, key.removeprefix(f"{CHANNEL}:"), sender_id, "/new",
                                           role=role, idem_key=None, callback_url=None, wait=wait)

    async def _session(self, key: str, limit: int, request: Request) -> dict[str, Any] | Response:
        if self.ch.sessions_view is None:
            return error_response(503, "session access is not available in this process")
        if not key.startswith(f"{CHANNEL}:") or key == f"{CHANNEL}:":
            return error_response(404, f"no webhook session {key!r} (keys look like 'webhook:<chat_id>')")
        detail = await self.ch.sessions_view.recent(key, limit)
        if detail is None:
            return error_response(404, f"no webhook session {key!r}")
        kind, token_fp = self.ch.caller_of(request)
        chat_id = key.removeprefix(f"{CHANNEL}:")
        if not await asyncio.to_thread(_may_read, self.ch.ledger, kind, token_fp, chat_id):
            return error_response(403, unwritten_refusal(key, bool(self.ch.cfg.admin_token.get_secret_value())))
        return detail


def _may_read(ledger: ChatLedger, kind: Credential, token_fp: str, chat_id: str) -> bool:
    if kind == "admin":
        return True
    return may_read(kind, wrote=ledger.wrote(token_fp, chat_id), role=ledger.role_of(chat_id))
