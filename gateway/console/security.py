"""Response headers for everything the console serves: strict CSP, no framing, no caching.

The page loads only its own scripts and styles (``'self'``, no inline code, nothing from
another origin) and talks only to its own origin. API answers are ``no-store``: they hold
private memory.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lucidgate.channels.webhook.api import discard_body

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")

HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]

PREFIXES = ("/api/console/", "/ui/")
EXACT = ("/", "/console")


def is_console_path(path: str) -> bool:
    return path in EXACT or path.startswith(PREFIXES)


class ConsoleHeaders:
    """ASGI middleware adding ``HEADERS`` to console responses (other routes untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_console_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in HEADERS if n not in present]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)


# The largest console request: a memory file at its 1,000,000-character limit, JSON-escaped.
MAX_CONSOLE_BODY_BYTES = 8 * 1024 * 1024


class ConsoleBodyCap:
    """ASGI middleware refusing console request bodies over ``limit`` bytes with a 413.

    The console's routes read JSON bodies whole; without a cap a client (or a page in the
    user's browser that got hold of the cookie) could make the daemon buffer gigabytes. A
    declared length over the limit is refused before reading; a chunked body is read up
    to the limit, then refused, else replayed to the route as it came."""

    def __init__(self, app: ASGIApp, limit: int = MAX_CONSOLE_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/api/console/") \
                or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await discard_body(receive)  # else the client, still sending, never reads the 413
            await self._refuse(send, int(declared))
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                if message.get("more_body", False):
                    await discard_body(receive)
                await self._refuse(send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # the disconnect, when it comes
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, size: int) -> None:
        detail = json.dumps({"detail": f"the body is over {self.limit:,} bytes ({size:,} or more); "
                                       "console requests are limited to that"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(detail)).encode())]})
        await send({"type": "http.response.body", "body": detail})
