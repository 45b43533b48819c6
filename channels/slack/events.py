"""HTTP Events mode for the Slack channel: ``POST /slack/events``.

Bolt verifies the signature and dispatches; this route only caps the body while it streams
(a chunked body cannot slip past a header check) and replays the buffered body to Bolt.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp

MAX_BODY_BYTES = 1024 * 1024


def events_router(app: AsyncApp) -> APIRouter:
    router = APIRouter()
    handler = AsyncSlackRequestHandler(app)

    @router.post("/slack/events")
    async def slack_events(request: Request) -> Response:
        body = bytearray()
        async for chunk in request.stream():  # capped while streaming, not by header
            body.extend(chunk)
            if len(body) > MAX_BODY_BYTES:
                return Response("request body too large", status_code=413)
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if sent:  # after the body: the real channel (it reports a disconnect)
                return await request.receive()
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await handler.handle(Request(request.scope, receive=replay))

    return router
