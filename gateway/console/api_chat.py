"""Chat through the web channel: post a message, follow the chat as Server-Sent Events.

The stream sends the durable events after ``after`` (or the ``Last-Event-ID`` the
browser's EventSource resends on reconnect) as ``id:``-numbered SSE events, then live
ones; typing and previews are sent without an id so they never move the resume point.

Per agent (``?agent=<id>``): a chat belongs to one agent; its messages go to that agent (the
web channel stamps them with it, so no binding sends them elsewhere) and its log is kept in
that agent's workspace. The same chat id under two agents is two chats.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from lucidgate.channels.bus import BusClosed, BusFull
from lucidgate.channels.web.channel import CHAT_ID, Live, Subscription
from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency

if TYPE_CHECKING:
    from lucidgate.channels.web import WebChannel
    from lucidgate.gateway.agent.commands import CommandRegistry
    from lucidgate.gateway.console.auth import ConsoleAuth

KEEPALIVE_S = 15.0


class ChatInfo(BaseModel):
    chat_id: str
    session_key: str


class PostMessage(BaseModel):
    text: str = Field(min_length=1, max_length=200_000)


class Posted(BaseModel):
    id: int = Field(description="the event id of this message in the chat")
    message_id: str


class CommandInfo(BaseModel):
    name: str
    summary: str
    usage: str


def _check(chat_id: str) -> str:
    if not CHAT_ID.match(chat_id):
        raise HTTPException(400, "a chat id is 1-64 letters, digits or dashes")
    return chat_id


def _sse(item: Live) -> str:
    if item.event is not None:
        return f"id: {item.event.id}\nevent: message\ndata: {json.dumps(item.event.as_json(), ensure_ascii=False)}\n\n"
    return f"event: {item.kind}\ndata: {json.dumps({'text': item.text}, ensure_ascii=False)}\n\n"


async def _stream(sub: Subscription) -> AsyncIterator[str]:
    try:
        yield "retry: 1000\n\n"
        for event in sub.backlog:
            yield _sse(Live("event", event))
        while True:
            try:
                async with asyncio.timeout(KEEPALIVE_S):
                    item = await sub.next()
            except TimeoutError:
                yield ": keep-alive\n\n"  # proxies close silent connections
                continue
            if item.kind == "end":
                return
            yield _sse(item)
    finally:
        sub.close()


@dataclass(frozen=True)
class ChatParts:
    """One agent's commands and the stamp its messages carry ("": the default agent)."""

    commands: CommandRegistry
    stamp: str = ""


def router(auth: ConsoleAuth, web: WebChannel, registry: CommandRegistry | None = None, *,
           agents: PerAgent[ChatParts] | None = None) -> APIRouter:
    """Over each agent's ``ChatParts``, or one agent's command ``registry``."""
    if agents is None:
        assert registry is not None, "a command registry, or agents"
        agents = PerAgent.one(ChatParts(registry))
    api = APIRouter(prefix="/api/console", tags=[TAG], dependencies=[owner_dependency(auth)], responses=REFUSALS)
    agent = agents.dependency()

    @api.get("/chats", response_model=list[ChatInfo], summary="The web chats kept so far")
    async def chats(c: ChatParts = agent) -> list[ChatInfo]:
        return [ChatInfo(**chat) for chat in await web.chats(agent=c.stamp)]

    @api.post("/chats/{chat_id}/messages", response_model=Posted, status_code=202,
              summary="Send a message (or a /command) to the assistant in this chat",
              responses={400: {"description": "Bad chat id."},
                         503: {"description": "The assistant is busy or shutting down; retry."}})
    async def post(chat_id: str, body: PostMessage, c: ChatParts = agent) -> Posted:
        _check(chat_id)
        if not web.running:
            raise HTTPException(503, "the web chat is not running")
        try:
            event = await web.post(chat_id, body.text, agent=c.stamp)
        except (BusFull, BusClosed) as exc:
            raise HTTPException(503, str(exc)) from None
        return Posted(id=event.id, message_id=event.message_id or "")

    @api.get("/chats/{chat_id}/events", summary="Follow a chat (Server-Sent Events, resumable)",
             response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "`message` events (id-numbered: user, reply, error), "
                                             "`typing`, `activity` (the tool that runs: \"running grep…\") and "
                                             "`progress` (streamed text so far)."}})
    async def events(chat_id: str, after: int = Query(0, ge=0, description="last event id seen"),
                     last_event_id: str | None = Header(None), c: ChatParts = agent) -> StreamingResponse:
        _check(chat_id)
        seen = after
        if last_event_id and last_event_id.isdigit():
            seen = max(seen, int(last_event_id))
        sub = await web.subscribe(chat_id, seen, agent=c.stamp)
        return StreamingResponse(_stream(sub), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    @api.get("/commands", response_model=list[CommandInfo], summary="The slash commands the chat knows")
    async def commands(c: ChatParts = agent) -> list[CommandInfo]:
        found = [c.commands.get(n) for n in c.commands.names()]
        return [CommandInfo(name=c.name, summary=c.summary, usage=c.usage) for c in found if c is not None]

    return api
