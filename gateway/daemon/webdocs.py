"""API docs without a CDN, and a strict Content-Security-Policy on every HTML page.

FastAPI's ``/docs`` and ``/redoc`` load Swagger UI and ReDoc from a CDN (plus Google
Fonts and a favicon from another site): broken offline, and third-party script running
on the same origin as the console, where the webhook token lives. Here the same pages
load the copies the ``fastapi-offline`` package ships, from ``/docs/assets/``; their one
inline script is allowed by its hash, not by ``'unsafe-inline'``.

``SecurityHeaders`` adds a default CSP (nothing from anywhere but this origin) to any
HTML response that did not set its own, so a page added later is covered too.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ASSET_PREFIX = "/docs/assets"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
# What an HTML page may load when it says nothing itself: its own origin, nothing else.
DEFAULT_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; "
               "frame-ancestors 'none'")
PAGE_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def docs_csp(html: str, *, workers: bool = False) -> str:
    """CSP for a docs page: scripts from here plus the page's inline scripts by hash.

    Swagger UI and ReDoc set inline ``style=`` attributes, hence ``'unsafe-inline'`` for
    styles only; ReDoc's search runs in a worker built from a ``blob:`` URL.
    """
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in re.findall(r"<script>(.*?)</script>", html, flags=re.S))
    csp = (f"default-src 'none'; script-src 'self' {hashes}".rstrip() + "; style-src 'self' 'unsafe-inline'; "
           "img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
           "frame-ancestors 'none'")
    if workers:
        csp += "; worker-src blob:"
    return csp


class _Assets:
    """The packaged files, read once off the event loop."""

    def __init__(self) -> None:
        self._cache: dict[str, bytes] = {}

    async def get(self, name: str) -> bytes:
        if name not in self._cache:
            self._cache[name] = await asyncio.to_thread(
                lambda: resources.files("fastapi_offline").joinpath("static", name).read_bytes())
        return self._cache[name]


def add_offline_docs(app: FastAPI, *, title: str) -> None:
    """``/docs``, ``/redoc`` and their assets; call on an app made with ``docs_url=None``."""
    assets = _Assets()
    openapi_url = app.openapi_url or "/openapi.json"
    swagger = bytes(get_swagger_ui_html(
        openapi_url=openapi_url, title=f"{title} — API docs",
        swagger_js_url=f"{ASSET_PREFIX}/swagger-ui-bundle.js", swagger_css_url=f"{ASSET_PREFIX}/swagger-ui.css",
        swagger_favicon_url=f"{ASSET_PREFIX}/favicon.png",
        # The validator badge would send the schema to an outside service.
        swagger_ui_parameters={"validatorUrl": None}).body).decode()
    redoc = bytes(get_redoc_html(openapi_url=openapi_url, title=f"{title} — API reference",
                           redoc_js_url=f"{ASSET_PREFIX}/redoc.standalone.js",
                           redoc_favicon_url=f"{ASSET_PREFIX}/favicon.png", with_google_fonts=False).body).decode()
    pages = {"/docs": (swagger, docs_csp(swagger)), "/redoc": (redoc, docs_csp(redoc, workers=True))}

    # Plain Starlette routes: served, but not API operations (they stay out of the schema).
    def page_route(html: str, csp: str) -> Any:
        async def page(request: Request) -> Response:
            return Response(html, media_type="text/html; charset=utf-8",
                            headers={"Content-Security-Policy": csp, **PAGE_HEADERS})
        return page

    for path, (html, csp) in pages.items():
        app.add_route(path, page_route(html, csp), methods=["GET"], include_in_schema=False)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return Response(status_code=404)
        return Response(await assets.get(name), media_type=ASSETS[name],
                        headers={"Cache-Control": "public, max-age=86400", **PAGE_HEADERS})

    app.add_route(ASSET_PREFIX + "/{name}", asset, methods=["GET"], include_in_schema=False)


class SecurityHeaders:
    """ASGI middleware: HTML responses without a CSP get ``DEFAULT_CSP`` (and nosniff)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                if ctype.startswith(b"text/html"):
                    if b"content-security-policy" not in names:
                        headers.append((b"content-security-policy", DEFAULT_CSP.encode()))
                    if b"x-content-type-options" not in names:
                        headers.append((b"x-content-type-options", b"nosniff"))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
