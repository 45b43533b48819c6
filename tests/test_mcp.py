"""MCP client end to end: real servers (the PyPI reference `mcp-server-time` over stdio, a
streamable-HTTP server built here with the SDK's server side, a server that crashes) driven
by turns of the fake LLM."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.mcp import McpManager, probe, tool_name
from lucidgate.gateway.mcp.tools import compact_schema
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.served import served

TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}

CRASHY = '''
import os
from mcp.server.mcpserver import MCPServer

app = MCPServer("crashy")


@app.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return "echo: " + text


@app.tool()
def crash() -> str:
    """Die in the middle of the call."""
    os._exit(3)


app.run()
'''


@asynccontextmanager
async def running(config: Any) -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        yield gw, channel


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m.get("role") == "tool"]


@asynccontextmanager
async def http_mcp_server() -> AsyncIterator[str]:
    """A small streamable-HTTP MCP server (the SDK's server side) on 127.0.0.1."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("notes")
    notes: list[str] = []

    @server.tool()
    def add_note(text: str, tags: list[str] | None = None) -> str:
        """Store a note."""
        notes.append(text)
        return f"stored note #{len(notes)}: {text} {sorted(tags or [])}"

    @server.tool()
    def count_notes() -> int:
        """How many notes are stored."""
        return len(notes)

    async with served(server.streamable_http_app(), lifespan="on") as url:
        yield f"{url}/mcp"


async def test_time_server_over_stdio_answers_in_a_turn(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    config = make_config(tools={"mcpServers": {"time": TIME_SERVER}})
    fake_llm.queue(ToolCalls([("mcp_time_get_current_time", {"timezone": "Asia/Tokyo"})]),
                   Reply("It is late in Tokyo."))
    async with running(config) as (gw, ch):
        assert gw.parts.mcp is not None
        await gw.parts.mcp.wait_for("time", ["connected"])
        await ch.say("what time is it in Tokyo?", sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
    assert reply.kind == "text" and reply.text == "It is late in Tokyo."
    offered = {t["function"]["name"]: t["function"] for t in fake_llm.requests[0]["tools"]}
    schema = offered["mcp_time_get_current_time"]["parameters"]
    assert schema["required"] == ["timezone"] and "title" not in json.dumps(schema)
    [result] = tool_results(fake_llm.requests[1])
    data = json.loads(result["content"])
    assert data["timezone"] == "Asia/Tokyo" and data["datetime"].endswith("+09:00")


async def test_streamable_http_server_tools_work_and_enabled_tools_filters(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    async with http_mcp_server() as url:
        config = make_config(tools={"mcpServers": {"notes": {"url": url, "enabledTools": ["add_note"]}}})
        fake_llm.queue(ToolCalls([("mcp_notes_add_note", {"text": "buy milk", "tags": ["b", "a"]})]),
                       Reply("Noted."))
        async with running(config) as (gw, ch):
            assert gw.parts.mcp is not None
            status = await gw.parts.mcp.wait_for("notes", ["connected"])
            assert status.transport == "streamableHttp" and status.tools == ["mcp_notes_add_note"]
            await ch.say("remember to buy milk", sender_id="local")
            [reply] = await ch.wait_replies(1, timeout=60)
            await ch.say("/status", sender_id="local")
            status_reply = (await ch.wait_replies(2, timeout=60))[1]
        assert reply.text == "Noted."
        assert "mcp: notes: connected (1 tools)" in status_reply.text
        names = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
        assert "mcp_notes_add_note" in names and "mcp_notes_count_notes" not in names
        [result] = tool_results(fake_llm.requests[1])
        assert result["content"] == "stored note #1: buy milk ['a', 'b']"


async def test_a_server_crashing_mid_call_is_a_tool_error_and_it_reconnects(
    fake_llm: FakeLLMServer, make_config: Callable, tmp_path: Path
) -> None:
    script = tmp_path / "crashy.py"
    script.write_text(CRASHY)
    config = make_config(tools={"mcpServers": {"crashy": {"command": sys.executable, "args": [str(script)]}}})
    fake_llm.queue(ToolCalls([("mcp_crashy_crash", {})]), Reply("That tool broke."),
                   ToolCalls([("mcp_crashy_echo", {"text": "again"})]), Reply("Back."))
    async with running(config) as (gw, ch):
        assert gw.parts.mcp is not None
        await gw.parts.mcp.wait_for("crashy", ["connected"])
        await ch.say("crash it", sender_id="local")
        [first] = await ch.wait_replies(1, timeout=60)
        [result] = tool_results(fake_llm.requests[1])
        assert result["content"].startswith("Error:") and "crashy" in result["content"]

        async def reconnected() -> None:
            while gw.parts.mcp is not None and gw.parts.mcp.status()[0].connects < 2:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(reconnected(), 30)
        await ch.say("try again", sender_id="local")
        replies = await ch.wait_replies(2, timeout=60)
    assert first.text == "That tool broke." and replies[1].text == "Back."
    echoed = tool_results(fake_llm.requests[3])[-1]
    assert echoed["content"] == "echo: again"


async def test_a_dead_server_never_blocks_start_and_is_retried(
    fake_llm: FakeLLMServer, make_config: Callable, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-server")
    config = make_config(tools={"mcpServers": {"ghost": {"command": missing}}})
    fake_llm.queue(Reply("still here"))
    async with running(config) as (gw, ch):
        assert gw.parts.mcp is not None
        gw.parts.mcp._backoff_base_s = 0.01
        await ch.say("hello", sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
        # The turn went on without the server, and the owner is told which one is missing.
        assert reply.text.startswith("still here\n\n") and "MCP server 'ghost'" in reply.text

        async def retried() -> None:
            while gw.parts.mcp is not None and gw.parts.mcp.status()[0].failures < 2:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(retried(), 30)
        line = gw.parts.mcp.status_line()
        assert line is not None and "ghost: down" in line and "no-such-server" in line
    assert gw.parts.mcp.status()[0].state == "stopped"


async def test_mcp_tools_are_owner_only_unless_listed_in_guest_tools(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    config = make_config(tools={"mcpServers": {"time": TIME_SERVER},
                                "guestTools": ["mcp_time_convert_time"]},
                         channels={"webhook": {"owners": ["boss"]}})
    fake_llm.queue(Reply("guest answer"), ToolCalls([("mcp_time_get_current_time", {"timezone": "UTC"})]),
                   Reply("done"))
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="webhook", owners=gw.parts.config.channels.owners_of("webhook"))
    gw.add_channel("webhook", channel)
    async with gw:
        assert gw.parts.mcp is not None
        await gw.parts.mcp.wait_for("time", ["connected"])
        await channel.say("hi", sender_id="visitor", chat_id="g")
        await channel.wait_replies(1, timeout=60)
        guest_tools = {t["function"]["name"] for t in fake_llm.requests[0].get("tools", [])}
        assert "mcp_time_get_current_time" not in guest_tools and "mcp_time_convert_time" in guest_tools
        await channel.say("time?", sender_id="boss", chat_id="o")
        await channel.wait_replies(2, timeout=60)
    owner_tools = {t["function"]["name"] for t in fake_llm.requests[1]["tools"]}
    assert {"mcp_time_get_current_time", "mcp_time_convert_time"} <= owner_tools
    assert tool_results(fake_llm.requests[2])[0]["content"].startswith("{")


async def test_probe_reports_each_server_for_doctor(tmp_path: Path) -> None:
    from lucidgate.config.schema import McpServerConfig

    statuses = await probe({"time": McpServerConfig(**TIME_SERVER),
                            "ghost": McpServerConfig(command=str(tmp_path / "missing"))})
    by_name = {s.name: s for s in statuses}
    assert by_name["time"].state == "connected" and "mcp_time_get_current_time" in by_name["time"].tools
    assert by_name["ghost"].state == "retrying" and by_name["ghost"].error


def test_names_and_schemas_are_provider_safe() -> None:
    assert tool_name("my server", "do.thing") == "mcp_my_server_do_thing"
    assert len(tool_name("s" * 40, "t" * 40)) == 64
    schema = compact_schema({"$schema": "x", "title": "T", "type": "object", "additionalProperties": False,
                             "properties": {"a": {"title": "A", "type": "string", "description": "d" * 999}}})
    assert schema == {"type": "object", "properties": {"a": {"type": "string", "description": "d" * 300}}}
    assert compact_schema(None) == {"type": "object", "properties": {}}


def test_config_needs_exactly_one_transport() -> None:
    from pydantic import ValidationError

    from lucidgate.config.schema import McpServerConfig

    with pytest.raises(ValidationError, match="exactly one"):
        McpServerConfig(command="x", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValidationError, match="exactly one"):
        McpServerConfig()
    assert McpManager  # the public name stays importable
