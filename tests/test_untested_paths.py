"""Paths that had no test (issue 19): the daily token budget, what the user reads when the
provider is unreachable or the model unknown, and corrupt state files that must be survived."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.app import build_gateway
from lucidgate.memory.sessions import SessionStore, load_session_file, state_path
from lucidgate.scheduler.state import JobState
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


async def test_a_crash_mid_turn_closes_the_turn_and_the_chat_goes_on(
        make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    """Not a LucidError (a bug, a malformed provider answer): the user hears something went
    wrong, the transcript closes the turn (so a restart does not run it again), and the
    next message is answered normally."""
    gw = build_gateway(make_config())
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    real_complete = gw.parts.model.complete
    calls = 0

    async def crashing_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("'NoneType' object is not subscriptable")
        return await real_complete(*args, **kwargs)

    gw.parts.model.complete = crashing_once  # type: ignore[method-assign]
    fake_llm.queue(Reply("all good now"))
    async with gw:
        await channel.say("first", sender_id="local")
        [crashed] = await channel.wait_replies(1)
        session = await gw.parts.sessions.get("cli:1")
        assert session.pending_state() is None  # closed: nothing to resume at the next start
        await channel.say("second", sender_id="local")
        replies = await channel.wait_replies(2)
    assert crashed.kind == "error" and "something went wrong on my side" in crashed.text
    assert replies[1].text == "all good now"
    errors = [m for m in session.messages if m.get("status") == "error"]
    assert len(errors) == 1 and errors[0]["content"].startswith("(no reply: ")


async def test_stop_while_a_turn_is_starting_stops_it_before_the_model_is_called(
        make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    gw = build_gateway(make_config())
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    sessions = gw.parts.sessions
    real_append = sessions.append
    writing_user_line, release = asyncio.Event(), asyncio.Event()

    async def held_append(session: Any, *messages: dict[str, Any], sync: bool = False) -> None:
        if any(m.get("content") == "long task" for m in messages):
            writing_user_line.set()
            await release.wait()  # the turn is starting: its user line is being written
        await real_append(session, *messages, sync=sync)

    sessions.append = held_append  # type: ignore[method-assign]
    async with gw:
        await channel.say("long task", sender_id="local")
        await writing_user_line.wait()
        await channel.say("/stop", sender_id="local")
        [stopping] = await channel.wait_replies(1)
        release.set()
        replies = await channel.wait_replies(2)
    assert stopping.text == "Stopping…"
    assert replies[1].text == "Stopped."
    assert fake_llm.requests == []  # the turn never reached the model
    session = await sessions.get("cli:1")
    assert session.messages[-1]["status"] == "cancelled" and session.pending_state() is None
