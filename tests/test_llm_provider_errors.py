"""Error texts name the provider entry the user has to fix, not a ``<name>`` placeholder."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from gateway.errors import LLMError
from gateway.llm import LiteLLMChatModel
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import Fail, FakeLLMServer


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
    from gateway.app import build_gateway

    config = make_config(api_base=closed_port_url(), agents={"defaults": {"llmRetries": 0}})
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("hello", sender_id="local")
        [reply] = await channel.wait_replies(1, timeout=60)
    assert reply.kind == "error"
    assert "providers.openai.apiBase" in reply.text and "<name>" not in reply.text
