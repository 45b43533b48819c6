"""Webhook intake for the Telegram channel: ``POST /telegram/webhook``.

Used instead of long polling when ``channels.telegram.webhook.url`` is set. Telegram proves
each request with the secret-token header (compared in constant time); the body is capped
while it streams (a chunked body has no Content-Length) and handed to the channel's
``handle_update``, which journals it before the 200 tells Telegram it was received.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from telegram import Update

from lucidgate.channels.bus import BusClosed

MAX_WEBHOOK_BYTES = 1024 * 1024
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
PATH = "/telegram/webhook"


def webhook_router(
    *,
    secret: str,
    ready: Callable[[], bool],
    bot: Callable[[], Any],
    handle_update: Callable[[Update], Awaitable[None]],
) -> APIRouter:
    """The route; ``ready()`` is False while the bot is not connected (or is stopping)."""
    router = APIRouter()

    @router.post(PATH, include_in_schema=False)
    async def telegram_webhook(request: Request) -> Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), secret.encode()):
            return Response(status_code=403)
        if not ready():
            return Response(status_code=503)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_WEBHOOK_BYTES:
            return Response(status_code=413)
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > MAX_WEBHOOK_BYTES:
                return Response(status_code=413)
        try:
            update = Update.de_json(json.loads(body), bot())
        except Exception:
            return Response(status_code=400)
        if update is None:
            return Response(status_code=400)
        try:
            await handle_update(update)
        except BusClosed:
            return Response(status_code=503)  # Telegram retries later
        return Response(status_code=200)

    return router
