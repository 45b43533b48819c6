"""DingTalk end to end through the real gateway wiring: DingTalk stand-in -> dingtalk-stream ->
channel -> bus -> agent -> fake LLM -> back through the session webhook; plus the registry,
``lucid doctor`` and the console's channel list.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio

from lucidgate.channels import dingtalk as dingtalk_channel
from lucidgate.config.schema import Config
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.ops.doctor import render, run_checks
from tests.fakes.dingtalk_server import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.fakes.llm import FakeLLMServer, Reply
from tests.waiting import until

OWNER, FRIEND, STRANGER = "staff-owner", "staff-friend", "staff-stranger"
REFUSAL = "Sorry, I only talk to people my owner has allowed."
FIRST_REPLY_TIMEOUT = 30.0  # the first turn imports litellm


@pytest_asyncio.fixture
async def dt() -> AsyncIterator[FakeDingTalk]:
    async with FakeDingTalk() as fake:
        yield fake


def dingtalk_section(dt: FakeDingTalk, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET, "apiBase": dt.base_url,
            "allowFrom": [FRIEND], "owners": [OWNER], **extra}


@pytest_asyncio.fixture
async def gateway(make_config: Callable[..., Config], dt: FakeDingTalk,
                  fake_llm: FakeLLMServer) -> AsyncIterator[Gateway]:
    config = make_config(agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False}}},
                         channels={"dingtalk": dingtalk_section(dt)})
    gw = build_gateway(config)
    gw.add_channel("dingtalk", dingtalk_channel.build(config, gw.channel_deps))
    async with gw:
        await dt.wait_connected()
        yield gw


async def test_a_private_message_is_answered(gateway: Gateway, dt: FakeDingTalk, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("Your cat is **Miso**."))
    await dt.push(dt.robot_message("what is my cat called?", sender=OWNER))
    await until(lambda: dt.texts() == ["Your cat is **Miso**."], FIRST_REPLY_TIMEOUT, what="the answer")
    assert dt.sent[0].via == "webhook" and dt.sent[0].chat == f"cid-private-{OWNER}"
    assert fake_llm.last_user_text(fake_llm.requests[0]).endswith("what is my cat called?")
    session = gateway.parts.sessions.path_for(f"dingtalk:cid-private-{OWNER}")
    await until(lambda: session.exists() and "Your cat is **Miso**." in session.read_text(), what="the transcript")
    metrics = gateway.parts.metrics.render().decode()
    assert 'lucid_messages_in_total{channel="dingtalk"} 1.0' in metrics


async def test_a_group_mention_is_answered_and_other_group_talk_is_not(
        gateway: Gateway, dt: FakeDingTalk, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("Here is the summary."))
    await dt.acked(await dt.push(dt.robot_message("not for the bot", sender=FRIEND, group=True, at_bot=False)))
    await dt.push(dt.robot_message("summarise please", sender=FRIEND, group=True))
    await until(lambda: dt.texts() == ["Here is the summary."], FIRST_REPLY_TIMEOUT, what="the answer")
    assert dt.sent[0].chat == f"cid-group-{FRIEND}"
    assert len(fake_llm.requests) == 1
    assert "not for the bot" not in json.dumps(fake_llm.requests[0])


async def test_a_redelivered_message_is_answered_once(gateway: Gateway, dt: FakeDingTalk,
                                                      fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("Only once."), Reply("A second answer must not happen."))
    data = dt.robot_message("answer me once", sender=OWNER, msg_id="msgREDELIVERED")
    await dt.acked(await dt.push(data))
    await dt.acked(await dt.push(data))  # DingTalk delivers it again (a lost ACK)
    await until(lambda: dt.texts() == ["Only once."], FIRST_REPLY_TIMEOUT, what="the answer")
    await until(lambda: gateway.parts.bus.delivery.delivered >= 1, what="the delivered mark")
    assert len(fake_llm.requests) == 1 and dt.texts() == ["Only once."]


async def test_a_stranger_is_refused_without_reaching_the_model(gateway: Gateway, dt: FakeDingTalk,
                                                                fake_llm: FakeLLMServer) -> None:
    await dt.push(dt.robot_message("hello?", sender=STRANGER))
    await until(lambda: dt.texts() == [REFUSAL], what="the refusal")
    assert fake_llm.requests == []
    assert gateway.parts.sessions.path_for(f"dingtalk:cid-private-{STRANGER}").exists() is False


async def test_the_daemon_builds_dingtalk_from_the_registry(make_config: Callable[..., Config],
                                                           dt: FakeDingTalk) -> None:
    gw = build_gateway(make_config(channels={"dingtalk": dingtalk_section(dt)}), "daemon")
    channel = gw.channel("dingtalk")
    assert channel is not None and "stream mode via" in channel.describe()  # type: ignore[attr-defined]


def write_setup(tmp_path: Path, llm_url: str, dingtalk: dict[str, Any]) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model"}},
        "providers": {"openai": {"apiKey": "sk-doctor", "apiBase": llm_url}},
        "channels": {"webhook": {"token": "doctor-token-0123456789abcdefghijklmnop"}, "dingtalk": dingtalk},
        "gateway": {"port": 0}}))
    path.chmod(0o600)
    return path


async def test_doctor_checks_the_app_credentials(tmp_path: Path, dt: FakeDingTalk, fake_llm: FakeLLMServer) -> None:
    (tmp_path / "a").mkdir()
    good = write_setup(tmp_path / "a", fake_llm.base_url, dingtalk_section(dt))
    found = {r.name: r for r in await run_checks(good, {})}["dingtalk"]
    assert found.state == "ok" and "credentials accepted" in found.detail

    (tmp_path / "b").mkdir()
    bad = write_setup(tmp_path / "b", fake_llm.base_url, dingtalk_section(dt, clientSecret="not-the-secret-xyz"))
    results = await run_checks(bad, {})
    found = {r.name: r for r in results}["dingtalk"]
    assert found.state == "fail" and "refused the app credentials" in found.detail
    assert "clientSecret" in (found.fix or "")
    assert "not-the-secret-xyz" not in render(results)


async def test_the_console_status_lists_dingtalk(make_config: Callable[..., Config], dt: FakeDingTalk,
                                                 fake_llm: FakeLLMServer) -> None:
    from lucidgate.gateway.daemon.server import create_app
    from tests.console_kit import CONSOLE_TOKEN, WEBHOOK_TOKEN, running_console

    config = make_config(console={"token": CONSOLE_TOKEN}, gateway={"port": 0, "shutdownGraceS": 2},
                         agents={"defaults": {"dream": {"enabled": False}}},
                         channels={"webhook": {"token": WEBHOOK_TOKEN}, "dingtalk": dingtalk_section(dt)})
    gateway = build_gateway(config, "daemon")
    fake_llm.queue(Reply("hello from the console test"))
    async with running_console(config, app=create_app(config, gateway=gateway)) as c:
        await dt.wait_connected()
        await dt.push(dt.robot_message("hi", sender=OWNER))
        await until(lambda: dt.texts() == ["hello from the console test"], FIRST_REPLY_TIMEOUT, what="the answer")
        await until(lambda: gateway.parts.bus.delivery.delivered >= 1, what="the delivered mark")
        status = (await c.client.get("/api/console/status")).json()
    found = {ch["name"]: ch for ch in status["channels"]}["dingtalk"]
    assert found["up"] is True and found["outbox"]["delivered"] == 1 and found["outbox"]["pending"] == 0


def test_lucid_status_lists_dingtalk_among_the_enabled_channels(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from lucidgate.gateway.cli import build_app

    path = write_setup(tmp_path, "http://127.0.0.1:9/v1", {"enabled": True, "clientId": CLIENT_ID,
                                                            "clientSecret": CLIENT_SECRET})
    result = CliRunner().invoke(build_app(), ["status", "-c", str(path)])
    assert "channels:  dingtalk, webhook, openai, web" in result.output, result.output
