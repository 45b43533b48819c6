"""Provider fallbacks, model presets and costs, over litellm's real HTTP path to two fake
OpenAI-compatible servers: A (the primary) and B (the fallback)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.model.costs import call_cost, daily_costs
from lucidgate.gateway.model.fallback import is_fallback_error
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import Fail, FakeLLMServer, Reply
from tests.waiting import until

B_MODEL = "hosted_vllm/fake-model"  # an OpenAI-compatible provider prefix of its own -> server B


@pytest.fixture
async def server_b() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
def two_models(make_config: Callable[..., Any], server_b: FakeLLMServer) -> Callable[..., Any]:
    def build(**defaults: Any) -> Any:
        return make_config(agents={"defaults": {"fallbackModels": [B_MODEL], "llmRetries": 0, **defaults}},
                           providers={"hosted_vllm": {"apiKey": "sk-b", "apiBase": server_b.base_url}})

    return build


@asynccontextmanager
async def running(config: Any) -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        yield gw, channel



def fallback_count(gw: Gateway) -> float:
    value = gw.parts.metrics.registry.get_sample_value(
        "lucid_llm_fallbacks_total", {"from_model": "openai/fake-model", "to_model": B_MODEL})
    return value or 0.0


@pytest.mark.parametrize("failure", [Fail(500, "upstream exploded"), Fail(429, "slow down"),
                                     Fail(503, "overloaded")])
async def test_a_failing_primary_falls_over_to_the_next_model(
    failure: Fail, two_models: Callable[..., Any], fake_llm: FakeLLMServer, server_b: FakeLLMServer,
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.queue(failure)
    server_b.queue(Reply("answer from B"))
    async with running(two_models()) as (gw, ch):
        await ch.say("hello", sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
        assert fallback_count(gw) == 1
    assert reply.kind == "text" and reply.text == "answer from B"
    assert len(fake_llm.requests) == 1 and len(server_b.requests) == 1
    assert server_b.requests[0]["messages"][-1]["content"].endswith("hello")
    assert server_b.headers[0]["authorization"] == "Bearer sk-b"  # B's own provider settings
    assert any("falling back to hosted_vllm/fake-model" in r.getMessage() for r in caplog.records)
    ledger = workspace / "usage" / f"{datetime.now(UTC).strftime('%Y-%m-%d')}.jsonl"
    await until(lambda: ledger.exists() and ledger.read_text().endswith("\n"))  # written off the loop
    [entry] = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert entry["model"] == B_MODEL


@pytest.mark.parametrize("failure", [Fail(401, "invalid api key"), Fail(400, "malformed request")])
async def test_auth_and_bad_request_errors_never_fall_back(
    failure: Fail, two_models: Callable[..., Any], fake_llm: FakeLLMServer, server_b: FakeLLMServer
) -> None:
    fake_llm.queue(failure)
    async with running(two_models()) as (gw, ch):
        await ch.say("hello", sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
        assert fallback_count(gw) == 0
    assert reply.kind == "error"
    assert server_b.requests == [] and len(fake_llm.requests) == 1
    if failure.status == 401:
        assert "API key" in reply.text


async def test_when_every_model_fails_the_chain_is_retried_with_backoff(
    two_models: Callable[..., Any], fake_llm: FakeLLMServer, server_b: FakeLLMServer
) -> None:
    fake_llm.queue(Fail(500), Reply("A is back"))
    server_b.queue(Fail(502))
    async with running(two_models(llmRetries=1)) as (_, ch):
        await ch.say("hello", sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
    assert reply.text == "A is back"
    assert len(fake_llm.requests) == 2 and len(server_b.requests) == 1


async def test_model_presets_switch_per_session_and_only_for_the_owner(
    two_models: Callable[..., Any], fake_llm: FakeLLMServer, server_b: FakeLLMServer, workspace: Path
) -> None:
    config = two_models(fallbackModels=[], modelPresets={"big": B_MODEL})
    server_b.queue(Reply("B speaking"))
    fake_llm.queue(Reply("A in the other chat"))
    async with running(config) as (_, ch):
        await ch.say("/model", sender_id="local")
        await ch.say("/model big", sender_id="local")
        await ch.say("/model huge", sender_id="local")
        await ch.say("hi", sender_id="local")
        await ch.say("hi there", sender_id="local", chat_id="2")
        await ch.say("/model big", sender_id="stranger", chat_id="3")
        await ch.wait_replies(6, timeout=60)
    texts = [r.text for r in ch.replies("1")]  # sessions run concurrently: order only within a chat
    assert "model: openai/fake-model (default)" in texts[0] and "big = hosted_vllm/fake-model" in texts[0]
    assert texts[1] == f"This conversation now uses big ({B_MODEL})."
    assert "no preset 'huge'" in texts[2]
    assert texts[3] == "B speaking"
    assert [r.text for r in ch.replies("2")] == ["A in the other chat"]
    [refused] = ch.replies("3")
    assert "owner" in refused.text and "now uses" not in refused.text
    assert json.loads((workspace / "state" / "models.json").read_text()) == {"cli:1": "big"}
    assert len(server_b.requests) == 1 and len(fake_llm.requests) == 1


def test_error_classes() -> None:
    import httpx
    import litellm

    class Weird(Exception):  # not litellm's: judged by its status code
        status_code = 504

    timeout = litellm.Timeout("slow", model="m", llm_provider="openai")
    limited = litellm.RateLimitError("slow down", llm_provider="openai", model="m",
                                     response=httpx.Response(429))
    refused = litellm.AuthenticationError("bad key", llm_provider="openai", model="m")
    overflow = litellm.ContextWindowExceededError("too long", model="m", llm_provider="openai")
    assert is_fallback_error(timeout) and is_fallback_error(limited) and is_fallback_error(Weird())
    assert not is_fallback_error(refused) and not is_fallback_error(overflow)
    assert not is_fallback_error(ValueError())


def test_costs_come_from_litellms_local_price_map(tmp_path: Path) -> None:
    expected = 1000 * 1.5e-07 + 2000 * 6e-07
    assert call_cost("openai/gpt-4o-mini", 1000, 2000) == pytest.approx(expected)
    assert call_cost("openai/gpt-4o-mini", 1000, 0, cached=1000) == pytest.approx(1000 * 7.5e-08)
    assert call_cost("openai/fake-model", 10, 10) is None
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [{"ts": f"{day}T10:00:01+00:00", "job": "turn", "session": "s", "model": "openai/gpt-4o-mini",
              "prompt": 1000, "completion": 2000, "cached": 0},
             {"ts": f"{day}T10:00:09+00:00", "job": "turn", "session": "s", "model": "openai/fake-model",
              "prompt": 5, "completion": 5, "cached": 0}]
    (tmp_path / f"{day}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "garbage\n")
    totals = daily_costs(tmp_path, 3)[day]
    assert totals.dollars == pytest.approx(expected) and totals.calls == 2 and totals.unpriced_calls == 1
    assert "+1 call(s) of models without a price" in totals.describe()
