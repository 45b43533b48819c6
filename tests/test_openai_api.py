"""The OpenAI-compatible endpoint, driven by the official `openai` package (sync and async,
streaming and not) against the gateway served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from lucidgate.gateway.daemon.serve import GatewayServer
from tests.fakes.llm import Fail, FakeLLMServer, Reply, ToolCalls
from tests.test_webhook import TOKEN, transcript


@pytest.fixture
def api_config(make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> Callable[..., Any]:
    def build(**openai_section: Any) -> Any:
        return make_config(channels={"webhook": {"token": TOKEN}, "openai": {"waitTimeoutS": 20, **openai_section}},
                           gateway={"port": 0, "shutdownGraceS": 2})

    return build


@asynccontextmanager
async def serving(config: Any, token: str = TOKEN) -> AsyncIterator[tuple[openai.AsyncOpenAI, openai.OpenAI]]:
    async with GatewayServer(config, access_log=False) as server:
        base = f"{server.url}/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key=token, max_retries=0, timeout=30) as aclient:
            with openai.OpenAI(base_url=base, api_key=token, max_retries=0, timeout=30) as client:
                yield aclient, client


async def test_async_client_chats_and_only_the_last_user_message_is_new_input(
    api_config: Callable[..., Any], fake_llm: FakeLLMServer, workspace: Path
) -> None:
    fake_llm.queue(Reply("Hello Alice."), Reply("You said hello before."))
    async with serving(api_config()) as (aclient, _):
        history = [{"role": "system", "content": "client system prompt"},
                   {"role": "user", "content": "an old question the client replays"},
                   {"role": "assistant", "content": "an old answer"}]
        first = await aclient.chat.completions.create(
            model="lucidgate", user="alice", messages=[*history, {"role": "user", "content": "hello"}])
        second = await aclient.chat.completions.create(
            model="lucidgate", user="alice",
            messages=[{"role": "user", "content": [{"type": "text", "text": "what did I say?"}]}])
    assert first.choices[0].message.content == "Hello Alice." and first.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "You said hello before."
    sent = fake_llm.requests[1]["messages"]
    texts = " ".join(str(m.get("content")) for m in sent)
    assert "an old question the client replays" not in texts and "client system prompt" not in texts
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "user"]
    assert sent[-1]["content"].endswith("what did I say?")
    stored = transcript(workspace, "openai:alice")
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "hello"), ("assistant", "Hello Alice."),
        ("user", "what did I say?"), ("assistant", "You said hello before.")]


async def test_async_streaming_yields_sse_chunks_that_add_up(
    api_config: Callable[..., Any], fake_llm: FakeLLMServer
) -> None:
    answer = ("A long answer. " * 40).strip()
    fake_llm.queue(Reply(answer))
    async with serving(api_config()) as (aclient, _):
        stream = await aclient.chat.completions.create(
            model="lucidgate", stream=True, messages=[{"role": "user", "content": "tell me a lot"}],
            extra_headers={"X-Session-Id": "s-stream"})
        chunks = [chunk async for chunk in stream]
    assert len(chunks) > 3 and all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == answer
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_sync_client_streaming_and_not_with_a_session_header(
    api_config: Callable[..., Any], fake_llm: FakeLLMServer, workspace: Path
) -> None:
    fake_llm.queue(Reply("first answer"), Reply("second, streamed"))

    def talk(client: openai.OpenAI) -> tuple[str, str, list[str]]:
        headers = {"X-Session-Id": "desk"}
        plain = client.chat.completions.create(model="anything", messages=[{"role": "user", "content": "one"}],
                                               extra_headers=headers, user="ignored-when-header-set")
        stream = client.chat.completions.create(model="anything", stream=True, extra_headers=headers,
                                                messages=[{"role": "user", "content": "two"}])
        pieces = [c.choices[0].delta.content or "" for c in stream]
        models = [m.id for m in client.models.list()]
        return plain.choices[0].message.content or "", "".join(pieces), models

    async with serving(api_config()) as (_, client):
        plain, streamed, models = await asyncio.to_thread(talk, client)
    assert plain == "first answer" and streamed == "second, streamed" and models == ["lucidgate"]
    assert [m["content"] for m in transcript(workspace, "openai:desk") if m["role"] == "user"] == ["one", "two"]


async def test_auth_and_roles(api_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    async with serving(api_config(), token="wrong") as (aclient, _):
        with pytest.raises(openai.AuthenticationError):
            await aclient.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert fake_llm.requests == []
    fake_llm.queue(Reply("guest hi"))
    async with serving(api_config()) as (aclient, _):
        await aclient.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    guest_tools = {t["function"]["name"] for t in fake_llm.requests[0].get("tools", [])}
    assert "exec" not in guest_tools and "read_file" not in guest_tools
    fake_llm.queue(Reply("owner hi"))
    async with serving(api_config(owner=True, token="own-token"), token="own-token") as (aclient, _):
        reply = await aclient.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "owner hi"
    owner_tools = {t["function"]["name"] for t in fake_llm.requests[1]["tools"]}
    assert {"exec", "read_file"} <= owner_tools


async def test_bad_requests_and_failed_turns_are_openai_errors(
    api_config: Callable[..., Any], fake_llm: FakeLLMServer
) -> None:
    fake_llm.queue(Fail(400, "bad thing"))
    async with serving(api_config()) as (aclient, _):
        with pytest.raises(openai.BadRequestError, match="no user message"):
            await aclient.chat.completions.create(model="x", messages=[{"role": "system", "content": "only"}])
        with pytest.raises(openai.APIStatusError) as failed:
            await aclient.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        assert failed.value.status_code == 502
        fake_llm.queue(Fail(400, "bad again"))
        stream = await aclient.chat.completions.create(model="x", stream=True,
                                                       messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.APIError):
            async for _ in stream:
                pass


async def test_usage_is_the_turns_tokens_summed_over_its_model_calls(
    api_config: Callable[..., Any], fake_llm: FakeLLMServer
) -> None:
    """A turn with a tool step makes two model calls: ``usage`` is their sum, streamed or not."""
    fake_llm.queue(ToolCalls([("read_file", {"path": "nothing-here.txt"})], prompt_tokens=100, completion_tokens=7),
                   Reply("done", prompt_tokens=130, completion_tokens=5),
                   Reply("streamed", prompt_tokens=40, completion_tokens=3))
    async with serving(api_config(owner=True, token="own-token"), token="own-token") as (aclient, _):
        reply = await aclient.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "read it"}])
        stream = await aclient.chat.completions.create(
            model="x", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "again"}])
        chunks = [chunk async for chunk in stream]
    assert reply.choices[0].message.content == "done"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (230, 12, 242)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (40, 3, 43)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed"
