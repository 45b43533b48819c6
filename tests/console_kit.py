"""Shared by the console's API and browser tests: a running gateway and a logged-in client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from lucidgate.config import Config
from lucidgate.gateway.console.context import ConsoleContext
from lucidgate.gateway.runtime import GatewayParts
from lucidgate.gateway.daemon.serve import GatewayServer

CONSOLE_TOKEN = "console-token-0123456789abcdef"
WEBHOOK_TOKEN = "webhook-token-0123456789abcdef"
USER_MD = "# User\n\n- Name: Ana\n- Lives in Lisbon\n"
MEMORY_MD = "# Memory\n\n- Likes tea\n"


def console_config(make_config: Callable[..., Config], **sections: Any) -> Config:
    return make_config(console={"token": CONSOLE_TOKEN},
                       channels={"webhook": {"token": WEBHOOK_TOKEN, "callbackSecret": "cb-secret-0123456789"}},
                       gateway={"port": 0, "shutdownGraceS": 2}, **sections)


def seed_workspace(workspace: Path) -> None:
    """Known memory files before the gateway installs its templates around them."""
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    (workspace / "USER.md").write_text(USER_MD, encoding="utf-8")
    (workspace / "memory" / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")


@dataclass
class Console:
    server: GatewayServer
    client: httpx.AsyncClient
    csrf: str = ""

    @property
    def ctx(self) -> ConsoleContext:
        ctx = self.server.app.state.console
        assert isinstance(ctx, ConsoleContext)
        return ctx

    @property
    def parts(self) -> GatewayParts:
        """The parts of the gateway behind the console (for arranging and checking state)."""
        return self.server.app.state.lucid.gateway.parts

    @property
    def origin(self) -> dict[str, str]:
        return {"Origin": self.server.url}

    @property
    def unsafe(self) -> dict[str, str]:
        return {"Origin": self.server.url, "X-CSRF-Token": self.csrf}

    async def login(self, **body: str) -> httpx.Response:
        response = await self.client.post("/api/console/login", json=body or {"token": CONSOLE_TOKEN},
                                          headers=self.origin)
        if response.status_code == 200:
            self.csrf = response.json()["csrf"]
        return response


@asynccontextmanager
async def running_console(config: Config, *, app: Any = None, login: bool = True) -> AsyncIterator[Console]:
    async with GatewayServer(config, app=app, access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            console = Console(server, client)
            if login:
                assert (await console.login()).status_code == 200
            yield console


async def sse_events(client: httpx.AsyncClient, url: str, count: int,
                     headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Read ``count`` id-numbered ``message`` events from an SSE stream, then hang up."""
    found: list[dict[str, Any]] = []
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        event, data, ident = "message", "", None
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif line.startswith("id:"):
                ident = int(line[3:].strip())
            elif line == "":
                if data and event == "message":
                    item = json.loads(data)
                    assert item["id"] == ident
                    found.append(item)
                    if len(found) >= count:
                        return found
                event, data, ident = "message", "", None
    return found
