"""The terminal's way into a running gateway: ``lucid agent`` beside ``lucid gateway``.

When the daemon runs, ``lucid agent`` should not start a second agent on the same
workspace (two writers of one transcript, a second copy of every job) nor pay seconds of
``import litellm`` per message. Instead the gateway serves the terminal channel on
``POST /v1/local/messages`` and publishes where to reach it in ``state/local.json``
(mode 0600: whoever can read the workspace is the owner anyway). The token in that file is
new on every start, so a stale file only ever leads to a refused or failed connection, and
the CLI then falls back to running the agent in-process.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from channels.bus import BusClosed, BusFull
from channels.cli import CliChannel
from channels.webhook.api import guarded_route
from config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

LOCAL_FILE = Path("state") / "local.json"
MAX_LOCAL_CHARS = 1_000_000
SESSION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_LOCAL_BODY_BYTES = 4 * MAX_LOCAL_CHARS + 1024  # JSON-escaped text may take up to ~4 bytes a char


class LocalMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_LOCAL_CHARS)
    session: str | None = Field(None, pattern=SESSION_NAME_PATTERN,
                                description="The terminal session to talk in (`lucid agent -s NAME`).")


class LocalReply(BaseModel):
    ok: bool = Field(description="False when the turn failed; `reply` then says why.")
    reply: str


class LocalError(BaseModel):
    detail: str


def new_token() -> str:
    return secrets.token_urlsafe(32)


def add_local_route(app: FastAPI, cli: CliChannel, token: str) -> None:
    """Mount ``POST /v1/local/messages``: the token is checked, then the body is capped as it
    streams, before anything is parsed (the webhook's guarded route class)."""
    expected = f"Bearer {token}".encode()

    def authorize(header: str | None) -> Response | None:
        if header and hmac.compare_digest(header.encode(), expected):
            return None
        return JSONResponse({"detail": "missing or wrong local token (see state/local.json)"}, 401)

    router = APIRouter(route_class=guarded_route(authorize, lambda: MAX_LOCAL_BODY_BYTES))

    @router.post("/v1/local/messages", response_model=LocalReply, tags=["local"],
                 summary="The terminal channel of a running gateway (used by `lucid agent`)",
                 responses={401: {"model": LocalError, "description": "Missing or wrong local token."},
                            413: {"model": LocalError, "description": "The body is over the limit."},
                            503: {"model": LocalError, "description": "Shutting down or busy; retry."}})
    async def local_message(body: LocalMessage) -> Any:
        try:
            ok, reply = await cli.ask(body.text, body.session)
        except (BusClosed, BusFull) as exc:
            return JSONResponse({"detail": str(exc)}, 503)
        return LocalReply(ok=ok, reply=reply)

    app.include_router(router)


def publish(workspace: Path, url: str, token: str) -> Path:
    """Write ``state/local.json`` (0600) once the gateway listens."""
    path = workspace / LOCAL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"url": url, "token": token, "pid": os.getpid()}))
    os.chmod(path, 0o600)
    return path


def withdraw(workspace: Path) -> None:
    (workspace / LOCAL_FILE).unlink(missing_ok=True)


def find_running(workspace: Path) -> tuple[str, str] | None:
    """(url, token) of a gateway running on ``workspace``, if its file names a live process."""
    try:
        data = json.loads((workspace / LOCAL_FILE).read_text(encoding="utf-8"))
        os.kill(int(data["pid"]), 0)
        return str(data["url"]), str(data["token"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ask_running(url: str, token: str, text: str, *, timeout_s: float,
                session: str | None = None) -> tuple[bool, str] | None:
    """Send ``text`` to the running gateway; None when it cannot be reached (fall back)."""
    import httpx

    try:
        response = httpx.post(f"{url}/v1/local/messages", json={"text": text, "session": session},
                              headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx.Timeout(timeout_s, connect=2.0))
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return None
    except httpx.HTTPError as exc:
        return False, f"the gateway did not answer ({type(exc).__name__})"
    if response.status_code == 401:
        return None  # a stale file from an earlier run: not our gateway
    try:
        data = response.json()
    except ValueError:
        return False, f"the gateway answered HTTP {response.status_code}"
    if response.status_code != 200:
        return False, str(data.get("detail", f"HTTP {response.status_code}"))
    return bool(data["ok"]), str(data["reply"])
