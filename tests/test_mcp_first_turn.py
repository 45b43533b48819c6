"""The first turn never races the MCP servers' start: a turn that begins while a configured
server is still starting waits for it (bounded by its connectTimeoutS), in a one-shot
`lucid agent -m` and in a freshly started gateway; a server that never comes up delays the
first turn only up to its timeout, and the reply names it.

The servers are the real PyPI `mcp-server-time`, behind a wrapper that holds the start back
until the test lets it go (a file appears), so no assertion depends on the machine's speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.mcp import McpManager
from lucidgate.gateway.tools.base import ToolRegistry
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_cli import lucid, write_config

TOOL = "mcp_time_get_current_time"

# Starts the real time server only once `release` exists (or after `delay` seconds), so the
# turn certainly begins while the server is still starting.
HELD_BACK = '''
import os, runpy, sys, time
release, delay = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + delay
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.argv = ["mcp-server-time", "--local-timezone", "UTC"]
runpy.run_module("mcp_server_time", run_name="__main__")
'''

# A server process that starts and never speaks MCP.
SILENT = "import time\ntime.sleep(3600)\n"


def held_back_server(tmp_path: Path, *, release: Path, delay_s: float, timeout_s: float) -> dict[str, Any]:
    script = tmp_path / "held_back.py"
    script.write_text(HELD_BACK)
    return {"command": sys.executable, "args": [str(script), str(release), str(delay_s)],
            "connectTimeoutS": timeout_s}


def silent_server(tmp_path: Path, *, timeout_s: float) -> dict[str, Any]:
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    return {"command": sys.executable, "args": [str(script)], "connectTimeoutS": timeout_s}


def tool_result(request: dict[str, Any]) -> dict[str, Any]:
    [result] = [m for m in request["messages"] if m.get("role") == "tool"]
    return json.loads(result["content"])


async def test_a_one_shot_run_gets_the_tools_of_a_server_still_starting(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    # The server starts only several seconds after the run began: without the wait, the
    # only turn of a one-shot run would be built before the tool exists.
    config = write_config(tmp_path / "config.json", tmp_path / "ws", fake_llm.base_url)
    doc = json.loads(config.read_text())
    doc["tools"] = {"mcpServers": {"time": held_back_server(
        tmp_path, release=tmp_path / "never", delay_s=4.0, timeout_s=120)}}
    config.write_text(json.dumps(doc))
    fake_llm.queue(ToolCalls([(TOOL, {"timezone": "Asia/Tokyo"})]), Reply("It is late in Tokyo."))

    code, out, err = await lucid("agent", "-m", "what time is it in Tokyo?", "--config", str(config),
                                 home=tmp_path, timeout=180)

    assert code == 0, err
    assert "It is late in Tokyo." in out
    assert TOOL in {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert tool_result(fake_llm.requests[1])["datetime"].endswith("+09:00")


async def test_a_fresh_gateways_first_turn_waits_for_a_starting_server(
    fake_llm: FakeLLMServer, make_config: Callable, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    config = make_config(tools={"mcpServers": {"time": held_back_server(
        tmp_path, release=release, delay_s=600, timeout_s=120)}})
    fake_llm.queue(ToolCalls([(TOOL, {"timezone": "UTC"})]), Reply("Done."))
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        mcp = gw.parts.mcp
        assert mcp is not None
        await channel.say("what time is it?", sender_id="local")
        # The turn is held while the server is starting: the model has not been asked yet.
        assert mcp.status()[0].state == "starting" and fake_llm.requests == []
        release.touch()
        [reply] = await channel.wait_replies(1, timeout=120)
        assert mcp.status()[0].state == "connected"
    assert reply.text == "Done."  # no "answered without" note: the server came up in time
    assert TOOL in {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert tool_result(fake_llm.requests[1])["timezone"] == "UTC"


async def test_a_server_that_never_answers_costs_the_first_turn_only_its_timeout(
    fake_llm: FakeLLMServer, make_config: Callable, tmp_path: Path
) -> None:
    config = make_config(tools={"mcpServers": {"time": silent_server(tmp_path, timeout_s=1.5)}})
    fake_llm.queue(Reply("I cannot check the time right now."), Reply("Still here."))
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("what time is it?", sender_id="local")
        [first] = await channel.wait_replies(1, timeout=60)
        mcp = gw.parts.mcp
        assert mcp is not None
        # The first attempt is over (its clean-up may still be stopping the process): a later
        # turn does not wait for the server again, and still says it is missing.
        wait = mcp.first_turn_wait()
        try:
            wait.send(None)
        except StopIteration as done:
            assert [m.split(" (")[0] for m in done.value] == ["MCP server 'time'"]
        else:
            raise AssertionError("a turn after the first attempt still waited for the server")
        ready = await gw.readiness()  # readiness does not wait for, or fail on, the server
        assert all(c.ok for c in ready.values()), ready
        assert gw.optional_checks()["mcp time"].ok is False
    assert "answered without the tools of MCP server 'time'" in first.text
    assert first.text.startswith("I cannot check the time right now.")
    assert TOOL not in {t["function"]["name"] for t in fake_llm.requests[0].get("tools") or []}


async def test_servers_start_together_so_the_wait_is_the_slowest_not_the_sum(tmp_path: Path) -> None:
    # Two silent servers: each one's deadline runs from the start, so once the first has
    # timed out the second is past its own deadline too and nothing waits on it further.
    servers = {name: silent_server(tmp_path, timeout_s=1.0) for name in ("a", "b")}
    from lucidgate.config.schema import McpServerConfig

    manager = McpManager({n: McpServerConfig.model_validate(s) for n, s in servers.items()},
                         ToolRegistry(), backoff_base_s=3600.0)
    await manager.start()
    try:
        missing = await manager.first_turn_wait()
        assert sorted(m.split("'")[1] for m in missing) == ["a", "b"]
        assert all(s.connects == 0 for s in manager.status())
    finally:
        await manager.stop()
