"""Error texts name the provider entry the user has to fix, not a ``<name>`` placeholder."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from lucidgate.gateway.errors import LLMError
from lucidgate.gateway.model.client import LiteLLMChatModel
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import Fail, FakeLLMServer, Reply


def closed_port_url() -> str:
    """A loopback URL nothing listens on: the provider is down."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("provider", ["openai", "hosted_vllm"])
async def test_provider_down_names_the_real_config_key(make_config: Callable, provider: str) -> None:
    base = closed_port_url()
    config = make_config(agents={"defaults": {"model": f"{provider}/some-model", "llmRetries": 0}},
                         providers={provider: {"apiKey": "", "apiBase": base}})
    model = LiteLLMChatModel(config)
    try:
        with pytest.raises(LLMError) as caught:
            await model.complete([{"role": "user", "content": "hi"}], job="turn")
    finally:
        model.close()
    text = str(caught.value)
    assert f"providers.{provider}.apiBase" in text and base in text
    assert "<name>" not in text


async def test_refused_key_names_the_real_config_key(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    fake_llm.queue(Fail(401, "Incorrect API key provided"))
    model = LiteLLMChatModel(make_config())
    try:
        with pytest.raises(LLMError) as caught:
            await model.complete([{"role": "user", "content": "hi"}], job="turn")
    finally:
        model.close()
    assert "providers.openai.apiKey" in str(caught.value) and "<name>" not in str(caught.value)


async def test_the_user_hears_which_entry_to_fix_when_the_provider_is_down(make_config: Callable) -> None:
    from lucidgate.gateway.app import build_gateway

    config = make_config(api_base=closed_port_url(), agents={"defaults": {"llmRetries": 0}})
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("hello", sender_id="local")
        [reply] = await channel.wait_replies(1, timeout=60)
    assert reply.kind == "error"
    assert "providers.openai.apiBase" in reply.text and "<name>" not in reply.text


async def test_a_429_waits_as_long_as_retry_after_asks(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    import time

    fake_llm.queue(Fail(429, "Rate limit reached, slow down", headers={"Retry-After": "1"}), Reply("at last"))
    model = LiteLLMChatModel(make_config(agents={"defaults": {"llmRetries": 2, "llmRetryBaseDelayS": 0.01}}))
    try:
        started = time.monotonic()
        result = await model.complete([{"role": "user", "content": "hi"}], job="turn")
        waited = time.monotonic() - started
    finally:
        model.close()
    assert result.content == "at last" and len(fake_llm.requests) == 2
    assert waited >= 0.95  # the provider's second, not the 0.01 s backoff


def test_retry_after_is_read_from_litellm_errors_and_bounded() -> None:
    import httpx
    import litellm

    from lucidgate.gateway.model.errors import MAX_RETRY_AFTER_S, is_transient, retry_after_s

    def limited(headers: dict[str, str]) -> litellm.RateLimitError:
        return litellm.RateLimitError("slow down", llm_provider="openai", model="m",
                                      response=httpx.Response(429, headers=headers))

    assert retry_after_s(limited({"retry-after": "2"})) == 2.0
    assert retry_after_s(limited({"retry-after-ms": "250"})) == 0.25
    assert retry_after_s(limited({"retry-after": str(MAX_RETRY_AFTER_S + 1)})) is None
    assert retry_after_s(limited({"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"})) is None
    assert retry_after_s(limited({})) is None
    assert is_transient(limited({}))
    bad = litellm.BadRequestError("no", model="m", llm_provider="openai")
    assert not is_transient(bad) and retry_after_s(bad) is None


class RenamedRateLimit(Exception):
    """Not litellm's class, merely named like it: classification is by class, not by name."""


RenamedRateLimit.__name__ = "RateLimitError"


def test_classification_is_by_class_not_by_name() -> None:
    from lucidgate.gateway.model.fallback import is_fallback_error
    from lucidgate.gateway.model.errors import is_transient

    assert not is_transient(RenamedRateLimit("x"))
    assert not is_fallback_error(RenamedRateLimit("x"))


async def test_retry_and_failure_log_lines_name_the_call_model_and_session(
    make_config: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(api_base=closed_port_url(),
                         agents={"defaults": {"llmRetries": 1, "llmRetryBaseDelayS": 0.01}})
    model = LiteLLMChatModel(config)
    try:
        with caplog.at_level("WARNING", logger="lucidgate.gateway.model.client"), pytest.raises(LLMError):
            await model.complete([{"role": "user", "content": "hi"}], job="turn", session_key="telegram:42")
    finally:
        model.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "lucidgate.gateway.model.client"]
    retry = next(line for line in lines if "retrying in" in line)
    final = next(line for line in lines if "retrying" not in line and "failed" in line)
    for line in (retry, final):
        assert f"turn call to {config.agent.model} for telegram:42" in line, line
        assert "connection failed" in line and "InternalServerError" not in line, line
