"""The FastAPI app: a factory, a lifespan that owns the gateway, health and metrics routes.

``create_app(config)`` composes (has the root build a daemon gateway, mounts the channels'
routers, and the routes over the few parts the root hands the HTTP app, ``Gateway.http``) but
starts nothing; the lifespan starts the gateway and stops it. The split keeps the OpenAPI
schema complete before the first request while all I/O — the workspace, the bus journal,
channel connections, the agent — happens in the lifespan.

Shutdown is a drain, not a drop (DESIGN §11): ``Gateway.drain(grace)`` closes the
bus intake (new messages get 503), lets running turns finish within the grace period,
flushes their answers to the channels and lets channels answer whoever is still waiting;
only then does the server stop. ``gateway.daemon.serve`` calls it on SIGTERM/SIGINT, and the
lifespan calls it (a no-op the second time) so every way out drains the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from lucidgate.config.schema import Config
from lucidgate.gateway import __version__ as VERSION
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.console import mount_console
from lucidgate.gateway.daemon.local_api import add_local_agents, add_local_route, new_token
from lucidgate.gateway.daemon.local_search import add_local_search
from lucidgate.gateway.daemon.health import StorageWatch, probe_workspace
from lucidgate.gateway.daemon.provider_watch import ProviderWatch
from lucidgate.gateway.daemon.webdocs import SecurityHeaders, add_offline_docs
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.runtime import Gateway, HttpParts

logger = logging.getLogger(__name__)


class Check(BaseModel):
    ok: bool
    detail: str


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, Check]
    # Reported, never gating: a broken optional part (an MCP server) must not make the
    # daemon "not ready" for a load balancer or systemd.
    optional: dict[str, Check] = {}


class Health(BaseModel):
    status: str
    version: str


class GatewayState:
    """What the routes and the server runner share: the gateway, the parts the root handed the
    HTTP app, and the local API's token.

    Draining belongs to the gateway (``Gateway.drain``); this only forwards, so the server
    runner (gateway/daemon/serve.py) and the lifespan drain the same way.
    """

    def __init__(self, gateway: Gateway, http: HttpParts) -> None:
        self.gateway = gateway
        self.workspace = http.config.workspace
        self.metrics: Metrics = http.metrics
        self.local_token = new_token()
        self.storage = StorageWatch()
        self.provider_watch = ProviderWatch(http.metrics, http.model)

    @property
    def started(self) -> asyncio.Event:
        return self.gateway.started

    async def drain(self, grace_s: float) -> None:
        await self.gateway.drain(grace_s)

    def skip_grace(self) -> None:
        self.gateway.skip_grace()


def create_app(config: Config, *, gateway: Gateway | None = None) -> FastAPI:
    """Compose the app around a gateway built with its HTTP surfaces (a daemon's, or one built
    with ``http=True``). Nothing is started until the lifespan runs."""
    if gateway is None:
        gateway = build_gateway(config, "daemon")
    http = gateway.http
    if http is None:
        raise ValueError("this gateway was built without its HTTP surfaces: "
                         "build_gateway(config, 'daemon') or build_gateway(config, http=True)")
    state = GatewayState(gateway, http)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Gateway.start stops whatever it started when a later step fails, then re-raises.
        await gateway.start()
        ok, why = http.model.configured()
        if not ok:
            logger.warning("no model is configured (%s): the gateway runs, /readyz reports not ready "
                           "and messages fail until one is", why)
        state.provider_watch.start()
        try:
            yield
        finally:
            await state.provider_watch.stop()
            try:
                await state.drain(config.gateway.shutdown_grace_s)
            finally:
                await gateway.stop(grace_s=0)  # turns still running now stay pending
                logger.info("gateway stopped")

    app = FastAPI(title="lucidgate", version=VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="A self-hosted gateway for a personal AI assistant that remembers.")
    app.state.lucid = state
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(OSError, state.storage.handler())  # full disk: 507, unwritable: 503
    app.add_middleware(SecurityHeaders)  # a strict CSP on every HTML page that sets none
    add_offline_docs(app, title="lucidgate")  # Swagger UI and ReDoc from a package, no CDN
    _add_health_routes(app, state)
    mount_console(app, gateway, http.console, version=VERSION)
    add_local_route(app, http.cli, state.local_token, agents=list(gateway.agents))
    add_local_agents(app, gateway, state.local_token)
    add_local_search(app, http.recall, state.local_token)
    for router in gateway.routers():
        app.include_router(router)
    return app


def _add_health_routes(app: FastAPI, state: GatewayState) -> None:
    @app.get("/healthz", response_model=Health, tags=["ops"], summary="The process is up")
    async def healthz() -> Health:
        return Health(status="ok", version=VERSION)

    async def healthz_head(request: Request) -> Response:  # monitors that probe with HEAD
        return Response(status_code=200, media_type="application/json")

    app.add_route("/healthz", healthz_head, methods=["HEAD"], include_in_schema=False)

    @app.get("/readyz", response_model=Readiness, tags=["ops"], summary="Ready to take messages",
             responses={503: {"model": Readiness, "description": "Not ready; see which check failed."}})
    async def readyz() -> JSONResponse:
        checks = {name: Check(ok=c.ok, detail=c.detail)
                  for name, c in (await state.gateway.readiness()).items()}
        probe = await asyncio.to_thread(probe_workspace, state.workspace)
        _storage_and_model(state, checks, probe)
        ready = all(c.ok for c in checks.values())
        optional = {name: Check(ok=c.ok, detail=c.detail) for name, c in state.gateway.optional_checks().items()}
        return JSONResponse(Readiness(ready=ready, checks=checks, optional=optional).model_dump(),
                            status_code=200 if ready else 503)

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics", response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}})
    async def metrics() -> Response:
        body, content_type = state.gateway.metrics_text()
        return Response(body, headers={"Content-Type": content_type})


def _storage_and_model(state: GatewayState, checks: dict[str, Check], probe: tuple[bool, str]) -> None:
    """Readiness beyond "configured": a write that reaches the disk (a full disk fails it),
    a storage error in the last minute, and the last model call's result."""
    ws = checks.get("workspace")
    failed_write = state.storage.recent()
    if ws is not None and ws.ok and not probe[0]:
        checks["workspace"] = Check(ok=False, detail=probe[1])
    elif ws is not None and ws.ok and failed_write:
        checks["workspace"] = Check(ok=False, detail=f"a recent write failed: {failed_write}")
    provider = checks.get("provider")
    last = state.metrics.last_llm
    if provider is not None and provider.ok and last is not None:  # a dead model server shows here
        ago = time.time() - last.at
        checks["provider"] = Check(ok=last.ok, detail=f"{provider.detail} (last call "
                                   f"{'succeeded' if last.ok else 'FAILED'} {ago:.0f}s ago, {last.job})")


async def _validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's 422, rendered ASCII-safe: it echoes the input, which may hold lone surrogates."""
    assert isinstance(exc, RequestValidationError)
    body = json.dumps({"detail": jsonable_encoder(exc.errors())}, ensure_ascii=True)
    return Response(body, status_code=422, media_type="application/json")
