"""Discord end to end through the real gateway wiring: Discord stand-in -> discord.py ->
channel -> bus -> agent -> fake LLM -> back; plus the registry, /metrics and ``lucid doctor``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio

from lucidgate.channels import discord as discord_channel
from lucidgate.config.schema import Config
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.ops.doctor import render, run_checks
from tests.fakes.discord_api import TOKEN, FakeDiscordAPI
from tests.fakes.llm import FakeLLMServer, HeldReply, Reply
from tests.waiting import until

OWNER = 4242
FRIEND = 4343  # allowed, a guest: its turns carry no tools, so the answer is streamed
STRANGER = 6666
REFUSAL = "Sorry, I only talk to people my owner has allowed."
FIRST_REPLY_TIMEOUT = 30.0  # the first turn imports litellm


@pytest_asyncio.fixture
async def dc() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        yield fake


def discord_section(dc: FakeDiscordAPI, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "token": TOKEN, "apiBase": dc.base_url, "allowFrom": [str(FRIEND)],
            "owners": [str(OWNER)],
            **extra}


@pytest_asyncio.fixture
async def gateway(make_config: Callable[..., Config], dc: FakeDiscordAPI,
                  fake_llm: FakeLLMServer) -> AsyncIterator[Gateway]:
    config = make_config(agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False}}},
                         channels={"discord": discord_section(dc, streaming=True, previewIntervalS=0.2)})
    gw = build_gateway(config)
    gw.add_channel("discord", discord_channel.build(config, gw.channel_deps))
    async with gw:
        await until(lambda: dc.gateway.current is not None, what="identified")
        yield gw


async def test_a_dm_is_answered_with_typing_first_as_a_reply(gateway: Gateway, dc: FakeDiscordAPI,
                                                            fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("Your cat is **Miso**."))
    sent = await dc.push_dm(user_id=OWNER, text="what is my cat called?")
    await until(lambda: dc.texts() == ["Your cat is **Miso**."], FIRST_REPLY_TIMEOUT, what="the answer")
    routes = [c.route for c in dc.calls]
    assert routes.index("POST /typing") < routes.index("POST /messages")
    (post,) = dc.calls_to("POST /messages")
    assert str(post.body["message_reference"]["message_id"]) == sent["id"]
    assert fake_llm.last_user_text(fake_llm.requests[0]).endswith("what is my cat called?")
    session = gateway.parts.sessions.path_for(f"discord:{OWNER + 1}")
    await until(lambda: "Your cat is **Miso**." in session.read_text(), what="the transcript")
    metrics = gateway.parts.metrics.render().decode()
    assert 'lucid_messages_in_total{channel="discord"} 1.0' in metrics


async def test_a_streamed_answer_edits_one_message(gateway: Gateway, dc: FakeDiscordAPI,
                                                   fake_llm: FakeLLMServer) -> None:
    answer = "Forty-two is the answer, and here is a longer explanation of why that is."
    release = threading.Event()
    fake_llm.queue(HeldReply(answer, release))
    await dc.push_dm(user_id=FRIEND, text="what is the answer?", name="fred")
    await until(lambda: dc.calls_to("POST /messages"), FIRST_REPLY_TIMEOUT, what="the first preview")
    preview = dc.calls_to("POST /messages")[0].body["content"]
    assert answer.startswith(preview) and preview != answer  # part of the answer, on screen early
    release.set()
    await until(lambda: dc.texts() == [answer], what="the final edit")
    assert len(dc.calls_to("POST /messages")) == 1  # one message, edited in place
    assert dc.calls_to("PATCH /messages")[-1].body["content"] == answer


async def test_a_stranger_is_refused_without_reaching_the_model(gateway: Gateway, dc: FakeDiscordAPI,
                                                                fake_llm: FakeLLMServer) -> None:
    await dc.push_dm(user_id=STRANGER, text="hello?", name="mallory")
    await until(lambda: dc.texts() == [REFUSAL], what="the refusal")
    assert fake_llm.requests == []
    assert gateway.parts.sessions.path_for(f"discord:{STRANGER + 1}").exists() is False


async def test_the_daemon_builds_discord_from_the_registry(make_config: Callable[..., Config],
                                                          dc: FakeDiscordAPI) -> None:
    gw = build_gateway(make_config(channels={"discord": discord_section(dc)}), "daemon")
    channel = gw.channel("discord")
    assert channel is not None and "gateway via" in channel.describe()  # type: ignore[attr-defined]


def write_setup(tmp_path: Path, llm_url: str, discord: dict[str, Any]) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model"}},
        "providers": {"openai": {"apiKey": "sk-doctor", "apiBase": llm_url}},
        "channels": {"webhook": {"token": "doctor-token-0123456789abcdefghijklmnop"}, "discord": discord},
        "gateway": {"port": 0}}))
    path.chmod(0o600)
    return path


async def test_doctor_checks_the_token_and_the_message_content_intent(
        tmp_path: Path, dc: FakeDiscordAPI, fake_llm: FakeLLMServer) -> None:
    (tmp_path / "a").mkdir()
    good = write_setup(tmp_path / "a", fake_llm.base_url, discord_section(dc))
    found = {r.name: r for r in await run_checks(good, {})}["discord"]
    assert found.state == "ok" and "Message Content intent on" in found.detail

    dc.app_flags = 0  # the intent is off in the Developer Portal
    found = {r.name: r for r in await run_checks(good, {})}["discord"]
    assert found.state == "fail" and "Privileged Gateway Intents" in (found.fix or "")

    (tmp_path / "b").mkdir()
    bad = write_setup(tmp_path / "b", fake_llm.base_url, discord_section(dc, token="not-the-token-xyz"))
    results = await run_checks(bad, {})
    found = {r.name: r for r in results}["discord"]
    assert found.state == "fail" and "401" in found.detail
    assert "not-the-token-xyz" not in render(results) and TOKEN not in render(results)


async def test_the_console_status_lists_discord_with_its_outbox(
        make_config: Callable[..., Config], dc: FakeDiscordAPI, fake_llm: FakeLLMServer) -> None:
    from lucidgate.gateway.daemon.server import create_app
    from tests.console_kit import CONSOLE_TOKEN, WEBHOOK_TOKEN, running_console

    config = make_config(console={"token": CONSOLE_TOKEN}, gateway={"port": 0, "shutdownGraceS": 2},
                         agents={"defaults": {"dream": {"enabled": False}}},
                         channels={"webhook": {"token": WEBHOOK_TOKEN}, "discord": discord_section(dc)})
    gateway = build_gateway(config, "daemon")
    fake_llm.queue(Reply("hello from the console test"))
    async with running_console(config, app=create_app(config, gateway=gateway)) as c:
        await until(lambda: dc.gateway.current is not None, what="identified")
        await dc.push_dm(user_id=OWNER, text="hi")
        await until(lambda: dc.texts() == ["hello from the console test"], FIRST_REPLY_TIMEOUT, what="the answer")
        await until(lambda: gateway.parts.bus.delivery.delivered >= 1, what="the delivered mark")
        status = (await c.client.get("/api/console/status")).json()
    found = {ch["name"]: ch for ch in status["channels"]}["discord"]
    assert found["up"] is True and found["outbox"]["delivered"] == 1 and found["outbox"]["pending"] == 0
