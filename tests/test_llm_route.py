"""The request path to a self-hosted OpenAI-compatible server: litellm's plain httpx route,
not the OpenAI SDK (whose per-message request transform made every turn cost O(prompt))."""

from __future__ import annotations

from collections.abc import Callable

from lucidgate.gateway.model.client import LiteLLMChatModel, _compatible_route
from tests.fakes.llm import FakeLLMServer, Reply


def test_routes() -> None:
    assert _compatible_route("openai/llama3", "openai") == "hosted_vllm/llama3"
    assert _compatible_route("anthropic/claude", "anthropic") == "anthropic/claude"


async def test_a_long_request_reaches_the_server_whole_through_the_plain_route(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    model = LiteLLMChatModel(make_config())
    await model.start()
    try:
        messages = [{"role": "system", "content": "be brief"}]
        for i in range(300):
            messages += [{"role": "user", "content": f"q{i} ünïcode 中文"},
                         {"role": "assistant", "content": f"a{i}"}]
        messages.append({"role": "user", "content": "last"})
        tools = [{"type": "function", "function": {"name": "noop", "description": "d",
                                                    "parameters": {"type": "object", "properties": {}}}}]
        fake_llm.queue(Reply("done"))
        result = await model.complete(messages, tools=tools, job="turn", session_key="cli:1")
    finally:
        model.close()
    assert result.content == "done"
    sent = fake_llm.requests[0]
    assert sent["model"] == "fake-model"  # the route prefix never reaches the server
    assert [m["content"] for m in sent["messages"]] == [m["content"] for m in messages]
    assert sent["tools"][0]["function"]["name"] == "noop" and sent["tool_choice"] == "auto"
