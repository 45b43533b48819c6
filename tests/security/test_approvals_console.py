"""Held actions in the web console, over real HTTP: the list shows what waits (the exact action
and why), and the owner's authenticated, CSRF-checked answer runs it once or refuses it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lucidgate.config.schema import Config
from tests.console_kit import console_config, running_console
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls


async def pending(client: httpx.AsyncClient, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The console's list once ``count`` requests wait in it."""
    deadline = time.monotonic() + timeout
    while True:
        r = await client.get("/api/console/approvals")
        assert r.status_code == 200, r.text
        listed: list[dict[str, Any]] = r.json()["approvals"]
        if sum(a["status"] == "pending" for a in listed) >= count:
            return listed
        assert time.monotonic() < deadline, f"{count} pending requests not listed: {listed}"
        await asyncio.sleep(0.05)


async def test_the_console_lists_held_actions_and_approves_or_denies_them_once(
        make_config: Callable[..., Config], fake_llm: FakeLLMServer, workspace: Path) -> None:
    config = console_config(make_config, tools={"approvals": "always", "exec": {"sandbox": "off"}})
    fake_llm.queue(ToolCalls([("exec", {"command": "echo ran >> pwned.txt"}),
                              ("exec", {"command": "echo no >> denied.txt"})]), Reply("Both asked."))
    async with running_console(config) as c:
        posted = await c.client.post("/api/console/chats/tab-1/messages", json={"text": "do both"}, headers=c.unsafe)
        assert posted.status_code in (200, 202), posted.text
        listed = await pending(c.client, 2)
        run = next(a for a in listed if "pwned" in a["arguments"])
        skip = next(a for a in listed if "denied" in a["arguments"])
        assert run["tool"] == "exec" and run["origin"] == 'tools.approvals is "always"'

        no_csrf = await c.client.post(f"/api/console/approvals/{run['id']}/approve", headers=c.origin)
        assert no_csrf.status_code == 403
        async with httpx.AsyncClient(base_url=c.server.url) as stranger:
            r = await stranger.post(f"/api/console/approvals/{run['id']}/approve", headers=c.origin)
            assert r.status_code == 401
            assert (await stranger.get("/api/console/approvals")).status_code == 401
        assert not (workspace / "pwned.txt").exists()

        ok = await c.client.post(f"/api/console/approvals/{run['id']}/approve", headers=c.unsafe)
        assert ok.status_code == 200 and "ran once" in ok.json()["message"]
        again = await c.client.post(f"/api/console/approvals/{run['id']}/approve", headers=c.unsafe)
        assert again.status_code == 404
        denied = await c.client.post(f"/api/console/approvals/{skip['id']}/deny", headers=c.unsafe)
        assert denied.status_code == 200 and "Denied" in denied.json()["message"]
        await c.parts.agent.idle()
        final = {a["id"]: a for a in (await c.client.get("/api/console/approvals")).json()["approvals"]}
        assert final[run["id"]]["status"] == "done" and final[run["id"]]["decided_by"] == "console:console"
        assert final[skip["id"]]["status"] == "denied"
    assert (workspace / "pwned.txt").read_text() == "ran\n"
    assert not (workspace / "denied.txt").exists()
