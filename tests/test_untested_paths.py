"""Paths that had no test (issue 19): the daily token budget, what the user reads when the
provider is unreachable or the model unknown, and corrupt state files that must be survived."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.app import build_gateway
from memory.sessions import SessionStore, load_session_file, state_path
from scheduler.state import JobState
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import Fail, FakeLLMServer, Reply


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there once the socket is closed


async def ask(config: Any, *texts: str) -> list[Any]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    replies = []
    async with gw:
        for text in texts:  # one after the other: the second turn sees the first one's usage
            await channel.say(text, sender_id="local")
            replies.extend(await channel.wait_replies(len(replies) + 1, timeout=60))
    return replies[-len(texts):]


async def test_over_the_daily_budget_the_user_is_told_and_the_model_is_not_called(
        make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("first answer"))
    config = make_config(usage={"dailyTokenBudget": 10})  # one turn spends far more than 10
    first, second = await ask(config, "hello", "and again")
    assert first.text == "first answer"
    assert second.kind == "error" and "usage.dailyTokenBudget" in second.text
    assert len(fake_llm.requests) == 1  # the second turn never reached the model


async def test_an_unreachable_provider_is_named_with_its_address(make_config: Callable[..., Any]) -> None:
    base = closed_port_url()
    config = make_config(api_base=base, agents={"defaults": {"llmRetries": 0}})
    (reply,) = await ask(config, "hello")
    assert reply.kind == "error"
    assert "could not reach the model provider" in reply.text and base in reply.text
    assert "providers.openai.apiBase" in reply.text


async def test_an_unknown_model_says_which_setting_to_check(
        make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Fail(404, "The model `gpt-9` does not exist", code="model_not_found"))
    (reply,) = await ask(make_config(agents={"defaults": {"llmRetries": 0}}), "hello")
    assert reply.kind == "error"
    assert "model was not found" in reply.text and "agents.defaults.model" in reply.text
    assert len(fake_llm.requests) == 1  # not retried


def test_a_corrupt_scheduler_state_starts_afresh_and_is_rewritten(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "scheduler.json"
    path.write_text('{"v": 1, "jobs": {"dream": {"last_run": ')  # torn mid-write by an old version
    state = JobState(path)
    with caplog.at_level(logging.WARNING):
        assert state.load() == {}
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    state.update("dream", last_run="2026-11-26T03:00:00+00:00")
    assert json.loads(path.read_text())["jobs"]["dream"]["last_run"] == "2026-11-26T03:00:00+00:00"
    assert JobState(path).load() == {"dream": {"last_run": "2026-11-26T03:00:00+00:00"}}


@pytest.mark.parametrize("sidecar", ["{not json", '{"last_consolidated": -3}', '["wrong shape"]',
                                     '{"last_consolidated": "six"}'])
async def test_a_corrupt_session_sidecar_falls_back_to_the_header(
        tmp_path: Path, sidecar: str, caplog: pytest.LogCaptureFixture) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("cli:local")
    for i in range(4):
        await store.append(session, {"role": "user", "content": f"m{i}"})
    await store.set_last_consolidated(session, 3)
    state_path(session.path).write_text(sidecar)
    with caplog.at_level(logging.WARNING):
        loaded = load_session_file(session.path)
    # Nothing is hidden: the header (0) wins over a mark that cannot be read.
    assert loaded.last_consolidated == 0 and [m["content"] for m in loaded.active()] == ["m0", "m1", "m2", "m3"]
