"""``GET /v1/chats/{chat_id}/messages?after=``: what the assistant said in a chat, for
integrations that have no callback URL.

A reminder the assistant set in a webhook chat fires when nobody is waiting on a request;
without a ``callback_url`` it has nowhere to be POSTed. It is written to the chat's
transcript (as every answer is), and the integration polls this route: every assistant line
after the position it last saw (``after``; the response's ``next_after`` is the one to send
next), oldest first, each marked ``reply``, ``reminder`` or ``error``. The integration token
reads only guest chats it wrote to; the owner token also owner chats; the admin token any.
Several agents: ``?agent=<id>`` reads that agent's chat (absent: the default agent's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from lucidgate.channels.webhook.api import AUTH_ERRORS, SessionsView, doc, error_response
from lucidgate.channels.webhook.auth import ChatLedger, Credential, may_read, unwritten_refusal
from lucidgate.channels.webhook.sessions_api import AGENT_HELP, agent_view

__all__ = ["ChatMessages", "SaidItem", "chat_messages_route"]


class SaidItem(BaseModel):
    id: int
    kind: Literal["reply", "reminder", "error"]
    text: str
    timestamp: str | None = None


class ChatMessages(BaseModel):
    chat_id: str
    messages: list[SaidItem]
    next_after: int


def chat_messages_route(*, sessions: SessionsView | None, ledger: ChatLedger,
                        caller: Callable[[Request], tuple[Credential, str]],
                        admin_configured: Callable[[], bool]) -> Callable[..., object]:
    async def read(chat_id: str, request: Request, after: Annotated[int, Query(ge=0)] = 0,
                   limit: Annotated[int, Query(ge=1, le=500)] = 100,
                   agent: Annotated[str | None, Query(max_length=64, description=AGENT_HELP)] = None) -> Response:
        if sessions is None:
            return error_response(503, "chat messages are not available in this process")
        chosen = agent_view(sessions, agent or "")
        if isinstance(chosen, Response):
            return chosen
        view, prefix = chosen
        key = f"{prefix}{chat_id}"
        kind, token_fp = caller(request)
        if kind != "admin" and not may_read(kind, wrote=await asyncio.to_thread(ledger.wrote, token_fp, chat_id),
                                            role=await asyncio.to_thread(ledger.role_of, chat_id)):
            return error_response(403, unwritten_refusal(key, admin_configured()))
        said = await view.said(key, after, limit)
        if said is None:
            return error_response(404, f"no webhook chat {chat_id!r}")
        items = [SaidItem(**m) for m in said]
        return JSONResponse(ChatMessages(chat_id=chat_id, messages=items,
                                         next_after=items[-1].id if items else after).model_dump())

    read.__doc__ = "What the assistant said in this chat after position `after` (replies, reminders)."
    return read


RESPONSES = {**AUTH_ERRORS, 403: doc("The integration token did not write to this chat."),
             404: doc("No such webhook chat.")}
