"""The built-in ``weather`` skill: listed and readable like every built-in, it names tools the
gateway really has, and its no-network rule covers the errors web_fetch really gives offline."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from pathlib import Path

from lucidgate.config.schema import WebFetchConfig
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.files import ReadFile
from lucidgate.gateway.tools.web import WebFetch
from tests.test_skills import by_name, ctx


async def test_weather_is_a_builtin_skill_the_model_can_read(workspace: Path) -> None:
    weather = by_name(workspace)["weather"]
    assert weather.builtin and weather.available and "web_fetch" in weather.description
    text = await ToolRegistry([ReadFile()]).execute(ctx(workspace), "read_file",
                                                    {"path": "skills/weather/SKILL.md"})
    assert "wttr.in" in text and "open-meteo.com" in text and "Never guess" in text


async def test_the_skill_names_real_tools_and_its_offline_rule_matches_their_errors(
        make_config: Callable, workspace: Path) -> None:
    body = by_name(workspace)["weather"].body
    tools = build_gateway(make_config()).parts.tools
    for named in ("web_fetch", "exec"):
        assert f"`{named}`" in body and tools.get(named) is not None

    async def offline(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    url = re.search(r"https://wttr\.in/<place>\?format=3", body)
    assert url is not None
    fetch = ToolRegistry([WebFetch(WebFetchConfig(), resolver=offline)])
    result = await fetch.execute(ctx(workspace), "web_fetch", {"url": url[0].replace("<place>", "Berlin")})
    assert result.startswith("Error:")
    rule = body.split("No network:", 1)[1]
    listed = re.search(r"\(([^)]*)\)", rule)
    assert listed is not None
    assert any(phrase.strip() in result for phrase in listed[1].split(",")), (result, listed[1])
