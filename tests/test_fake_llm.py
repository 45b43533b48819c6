"""The test kit itself: the fake LLM through litellm's real HTTP path, the fixtures, the guard.

No litellm monkeypatching: every call goes litellm -> OpenAI SDK -> httpx -> loopback socket
-> aiohttp. The exception classes asserted here are the ones the runner has to handle.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import litellm
import pydantic
import pytest
import uvicorn
from aiohttp import web

from tests.conftest import NetworkAccessRefused, NetworkGuard, deep_merge
from tests.fakes.llm import (
    AfterRequests,
    ContextOverflow,
    Fail,
    FakeLLMServer,
    Func,
    Hang,
    Reply,
    ToolCalls,
)

litellm.suppress_debug_info = True  # no "Give Feedback" banners in test output

USER = [{"role": "user", "content": "hi there"}]

# litellm 1.106.2's completion() imports its MCP gateway (needs the optional `mcp` package,
# not installed) whenever `tools=` is given; this private flag skips that import. The lead's
# runner must make the same choice (this flag, or install `mcp`).
NO_MCP: dict[str, Any] = {"_skip_mcp_handler": True}


async def ask(
    server: FakeLLMServer, messages: list[dict[str, Any]] | None = None, **kwargs: Any
) -> Any:
    return await litellm.acompletion(
        model="openai/fake-model",
        api_base=server.base_url,
        api_key="sk-test",
        messages=messages or USER,
        num_retries=0,
        max_retries=0,
        **kwargs,
    )


# ----------------------------------------------------------------------------- replies


async def test_scripted_reply_with_usage_and_cached_tokens(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("hello", prompt_tokens=120, completion_tokens=7, cached_tokens=100))
    response = await ask(fake_llm)
    assert response.choices[0].message.content == "hello"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.prompt_tokens == 120
    assert response.usage.completion_tokens == 7
    assert response.usage.total_tokens == 127
    assert response.usage.prompt_tokens_details.cached_tokens == 100


async def test_queue_is_fifo_then_default_echo(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("first"), Reply("second"))
    assert fake_llm.pending == 2
    texts = [(await ask(fake_llm)).choices[0].message.content for _ in range(3)]
    assert texts == ["first", "second", "echo: hi there"]
    assert fake_llm.pending == 0


async def test_default_usage_is_a_size_estimate(fake_llm: FakeLLMServer) -> None:
    response = await ask(fake_llm, [{"role": "user", "content": "x" * 400}])
    sent = fake_llm.requests[0]["messages"]
    assert response.usage.prompt_tokens == len(json.dumps(sent)) // 4
    assert response.usage.completion_tokens == len("echo: " + "x" * 400) // 4 + 1
    assert response.usage.prompt_tokens_details.cached_tokens == 0


async def test_default_can_be_replaced_and_func_computes_from_request(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.default = lambda request: Reply(f"n={len(request['messages'])}")
    fake_llm.queue(Func(lambda request: Func(lambda r: Reply(fake_llm.last_user_text(r).upper()))))
    assert (await ask(fake_llm)).choices[0].message.content == "HI THERE"
    assert (await ask(fake_llm)).choices[0].message.content == "n=1"


# ----------------------------------------------------------------------------- tool calls


async def test_tool_calls_arrive_parsed_with_unique_ids(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(
        ToolCalls([("read_file", {"path": "a.md"}), ("list_dir", {})], text="looking"),
        ToolCalls([("grep", {"pattern": "x"})]),
    )
    tools = [_tool("read_file"), _tool("list_dir"), _tool("grep")]
    first = await ask(fake_llm, tools=tools, **NO_MCP)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content == "looking"
    assert [c.function.name for c in message.tool_calls] == ["read_file", "list_dir"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"path": "a.md"}
    assert json.loads(message.tool_calls[1].function.arguments) == {}

    follow_up = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [c.model_dump() for c in message.tool_calls],
        },
        *[
            {"role": "tool", "tool_call_id": c.id, "name": c.function.name, "content": "ok"}
            for c in message.tool_calls
        ],
    ]
    second = await ask(fake_llm, follow_up, tools=[_tool("grep")], **NO_MCP)
    ids = [c.id for c in message.tool_calls] + [c.id for c in second.choices[0].message.tool_calls]
    assert ids == ["call_1", "call_2", "call_3"]
    logged = fake_llm.requests[1]["messages"]
    assert [m["role"] for m in logged] == ["user", "assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in logged[2:]] == ["call_1", "call_2"]
    assert fake_llm.requests[0]["tools"][0]["function"]["name"] == "read_file"


async def test_malformed_tool_arguments_arrive_verbatim(fake_llm: FakeLLMServer) -> None:
    broken = '{"path": "a.md", "old": '
    fake_llm.queue(ToolCalls([("edit_file", broken)]))
    response = await ask(fake_llm)
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "edit_file"
    assert call.function.arguments == broken


# ----------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (500, litellm.InternalServerError),
        (502, litellm.BadGatewayError),
        (503, litellm.ServiceUnavailableError),
        (504, litellm.Timeout),
        (429, litellm.RateLimitError),
        (400, litellm.BadRequestError),
        (401, litellm.AuthenticationError),
        (404, litellm.NotFoundError),
        (403, litellm.APIError),
    ],
)
async def test_http_errors_map_to_litellm_exceptions(
    fake_llm: FakeLLMServer, status: int, expected: type[Exception]
) -> None:
    fake_llm.queue(Fail(status, "scripted failure"))
    with pytest.raises(expected) as caught:
        await ask(fake_llm)
    assert type(caught.value) is expected  # exactly that class, not a sibling or subclass
    assert caught.value.status_code == status
    assert "scripted failure" in str(caught.value)
    assert len(fake_llm.requests) == 1  # num_retries=0 / max_retries=0: no hidden retries


async def test_context_overflow_maps_to_context_window_exceeded(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(ContextOverflow(), Reply("after"))
    with pytest.raises(litellm.ContextWindowExceededError) as caught:
        await ask(fake_llm)
    # It is also a BadRequestError: a runner must catch the overflow first.
    assert isinstance(caught.value, litellm.BadRequestError)
    assert caught.value.status_code == 400
    assert (await ask(fake_llm)).choices[0].message.content == "after"


async def test_a_plain_400_is_not_a_context_overflow(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Fail(400, "unsupported parameter"))
    with pytest.raises(litellm.BadRequestError) as caught:
        await ask(fake_llm)
    assert not isinstance(caught.value, litellm.ContextWindowExceededError)


async def test_hang_times_out_the_client_and_otherwise_answers_late(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.queue(Hang(30))
    started = time.monotonic()
    with pytest.raises(litellm.Timeout):
        await ask(fake_llm, timeout=0.3)
    assert time.monotonic() - started < 15  # the 0.3 s timeout, not the 30 s hang
    fake_llm.queue(Hang(0.2))
    assert (await ask(fake_llm, timeout=3)).choices[0].message.content == "late"


async def test_unreachable_server_raises_promptly() -> None:
    server = await FakeLLMServer().start()
    await server.stop()
    with pytest.raises(litellm.InternalServerError) as caught:
        await ask(server)
    assert "Connection error" in str(caught.value)


# ----------------------------------------------------------------------------- streaming


async def test_streaming_text_and_usage(fake_llm: FakeLLMServer) -> None:
    text = "hello streaming world, split into several deltas"
    fake_llm.queue(Reply(text, prompt_tokens=50, completion_tokens=9, cached_tokens=30))
    stream = await ask(fake_llm, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices]
    deltas = [d for d in deltas if d]
    assert "".join(deltas) == text
    assert len(deltas) > 3
    usage = next(c.usage for c in reversed(chunks) if getattr(c, "usage", None))
    assert (usage.prompt_tokens, usage.completion_tokens) == (50, 9)
    assert usage.prompt_tokens_details.cached_tokens == 30
    assert fake_llm.requests[0]["stream"] is True


async def test_streaming_tool_calls_reassemble(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(ToolCalls([("read_file", {"path": "notes/long-name.md"}), ("exec", "{bad")]))
    stream = await ask(fake_llm, stream=True)
    chunks = [chunk async for chunk in stream]
    built = litellm.stream_chunk_builder(chunks)
    calls = built.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["read_file", "exec"]
    assert json.loads(calls[0].function.arguments) == {"path": "notes/long-name.md"}
    assert calls[1].function.arguments == "{bad"
    assert built.choices[0].finish_reason == "tool_calls"


async def test_streaming_errors_raise_before_the_first_chunk(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Fail(503, "overloaded"), ContextOverflow())
    with pytest.raises(litellm.ServiceUnavailableError):
        stream = await ask(fake_llm, stream=True)
        async for _ in stream:
            pass
    with pytest.raises(litellm.ContextWindowExceededError):
        stream = await ask(fake_llm, stream=True)
        async for _ in stream:
            pass


# ----------------------------------------------------------------------------- server behaviour


async def test_latency_overlaps_for_concurrent_requests() -> None:
    """Requests are served side by side: two barrier answers, each waiting until both requests
    have arrived, are both answered (one after the other, the first would wait for ever)."""
    async with FakeLLMServer() as server:
        server.latency = 0.2  # the latency of one does not hold up the other either
        server.queue(AfterRequests(2, Reply("one")), AfterRequests(2, Reply("two")))
        first, second = await asyncio.gather(
            ask(server, [{"role": "user", "content": "a"}]),
            ask(server, [{"role": "user", "content": "b"}]),
        )
    assert {first.choices[0].message.content, second.choices[0].message.content} == {"one", "two"}


async def test_a_barrier_answer_alone_fails_instead_of_hanging() -> None:
    async with FakeLLMServer() as server:
        server.queue(AfterRequests(2, Reply("never"), timeout=0.2))
        with pytest.raises(litellm.InternalServerError) as raised:
            await ask(server)
    assert "only 1 of 2 requests arrived" in str(raised.value)


async def test_request_log_records_bodies_and_headers(fake_llm: FakeLLMServer) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "two"}],
        },
    ]
    await ask(fake_llm, messages, temperature=0.2, max_tokens=64, extra_headers={"X-Trace": "t1"})
    body = fake_llm.requests[0]
    assert body["model"] == "fake-model"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64
    assert fake_llm.last_user_text() == "part one, two"
    assert fake_llm.headers[0]["authorization"] == "Bearer sk-test"
    assert fake_llm.headers[0]["x-trace"] == "t1"
    assert fake_llm.headers[0]["x-stainless-retry-count"] == "0"


async def test_last_user_text_without_requests_fails_loudly() -> None:
    server = FakeLLMServer()
    with pytest.raises(AssertionError, match="no request"):
        server.last_user_text()
    assert server.last_user_text({"messages": [{"role": "system", "content": "s"}]}) == ""


async def test_models_endpoint_and_bad_json(fake_llm: FakeLLMServer) -> None:
    async with httpx.AsyncClient(base_url=fake_llm.base_url) as client:
        models = await client.get("/models")
        bad = await client.post(
            "/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"}
        )
    assert [m["id"] for m in models.json()["data"]] == ["fake-model"]
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert fake_llm.requests == []


async def test_wait_for_requests(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Hang(2))
    task = asyncio.create_task(ask(fake_llm, timeout=5))
    await fake_llm.wait_for_requests(1, timeout=3)
    assert fake_llm.last_user_text() == "hi there"
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(TimeoutError):
        await fake_llm.wait_for_requests(2, timeout=0.1)


def test_threaded_server_serves_sync_clients() -> None:
    server = FakeLLMServer().start_in_thread()
    try:
        server.queue(Reply("from a thread"))
        response = litellm.completion(
            model="openai/fake-model", api_base=server.base_url, api_key="sk-test",
            messages=USER, num_retries=0, max_retries=0,
        )
        assert response.choices[0].message.content == "from a thread"
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    finally:
        server.stop_thread()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # really stopped
    server.stop_thread()  # idempotent


async def test_stop_does_not_wait_for_an_abandoned_hang() -> None:
    server = await FakeLLMServer().start()
    server.queue(Hang(30))
    with pytest.raises(litellm.Timeout):
        await ask(server, timeout=0.2)
    started = time.monotonic()
    await server.stop()
    assert time.monotonic() - started < 15  # not the 30 s the hang would take


# ----------------------------------------------------------------------------- fixtures


def test_environment_is_hermetic(_hermetic_env: Path) -> None:
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert not [n for n in os.environ if n.upper().startswith("LUCIDGATE_")]
    assert os.environ["HOME"] == str(_hermetic_env)
    assert Path("~/.lucidgate").expanduser().parent == _hermetic_env


async def test_make_config_points_at_fake_llm(
    make_config: Any, fake_llm: FakeLLMServer, workspace: Path
) -> None:
    cfg = make_config(
        agents={"defaults": {"contextWindowTokens": 4096, "maxCompletionTokens": 512}}
    )
    agent = cfg.agents.defaults
    assert agent.workspace_path == workspace and workspace.is_dir()
    assert agent.model == "openai/fake-model"
    assert (agent.context_window_tokens, agent.max_completion_tokens) == (4096, 512)
    assert (agent.llm_timeout_s, agent.llm_retry_base_delay_s) == (5, 0.01)
    name, provider = cfg.provider_for(agent.model)
    assert name == "openai" and provider is not None
    assert provider.api_base == fake_llm.base_url
    assert provider.api_key.get_secret_value() == "sk-test"
    # The config really reaches the fake server.
    response = await litellm.acompletion(
        model=agent.model, api_base=provider.api_base, api_key=provider.api_key.get_secret_value(),
        messages=USER, num_retries=0, max_retries=0,
    )
    assert response.choices[0].message.content == "echo: hi there"


async def test_make_config_when_fake_llm_is_requested_first(
    fake_llm: FakeLLMServer, make_config: Any
) -> None:
    assert make_config().providers.openai.api_base == fake_llm.base_url


def test_make_config_overrides(make_config: Any) -> None:
    cfg = make_config(api_base="http://127.0.0.1:9/v1")
    assert cfg.providers.openai.api_base == "http://127.0.0.1:9/v1"
    assert make_config().providers.openai.api_base is None  # no fake_llm in this test
    # snake_case replaces the camelCase default instead of clashing with it
    assert make_config(agents={"defaults": {"llm_timeout_s": 1}}).agents.defaults.llm_timeout_s == 1
    cfg = make_config(channels={"telegram": {"enabled": True, "allowFrom": ["42"]}})
    assert cfg.channels.telegram.allow_from == ["42"]
    assert cfg.agents.defaults.llm_timeout_s == 5  # untouched sections keep the kit's values
    with pytest.raises(pydantic.ValidationError, match="contextWindowTokenz"):
        make_config(agents={"defaults": {"contextWindowTokenz": 1}})


def test_deep_merge_does_not_mutate_and_replaces_leaves() -> None:
    base = {"a": {"b": 1, "c": [1]}, "d": 2}
    merged = deep_merge(base, {"a": {"c": [2], "e": {"f": 3}}, "d": {"x": 1}})
    assert merged == {"a": {"b": 1, "c": [2], "e": {"f": 3}}, "d": {"x": 1}}
    assert base == {"a": {"b": 1, "c": [1]}, "d": 2}


# ----------------------------------------------------------------------------- network guard


def test_guard_refuses_non_loopback_ip_before_connecting(network_guard: NetworkGuard) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"non-loopback address \('10\.1\.2\.3', 80\)"):
        socket.create_connection(("10.1.2.3", 80), timeout=5)
    assert time.monotonic() - started < 2.5  # refused at once, not a timed-out attempt (5 s)
    assert network_guard.refused[-1] == ("10.1.2.3", 80)


def test_guard_refuses_dns_names_without_resolving(network_guard: NetworkGuard) -> None:
    with pytest.raises(RuntimeError, match="non-loopback address"):
        socket.create_connection(("example.com", 80), timeout=5)
    with pytest.raises(RuntimeError, match="non-loopback address"):
        socket.getaddrinfo("example.com", 443)  # a gaierror would mean DNS was tried
    assert network_guard.refused[-2:] == [("example.com", 80), ("example.com", 443)]


def test_guard_blocks_the_socket_itself() -> None:
    # A UDP connect() only records the peer: had the real call run, getpeername would say so.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with pytest.raises(RuntimeError, match="non-loopback"):
            udp.connect(("10.1.2.3", 9))
        with pytest.raises(RuntimeError, match="non-loopback"):
            udp.connect_ex(("192.0.2.1", 9))
        with pytest.raises(RuntimeError, match="non-loopback"):
            udp.connect(("0.0.0.0", 9))
        with pytest.raises(OSError):
            udp.getpeername()
        with pytest.raises(RuntimeError, match="non-loopback"):
            udp.sendto(b"x", ("10.1.2.3", 9))
        with pytest.raises(RuntimeError, match="non-loopback"):
            udp.sendto(b"x", 0, ("example.com", 9))
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as udp6:
        for address in (("2001:db8::1", 9), ("::ffff:10.0.0.1", 9)):
            with pytest.raises(RuntimeError, match="non-loopback"):
                udp6.connect(address)


def test_guard_allows_loopback_and_unix_sockets(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver, socket.socket(
        socket.AF_INET, socket.SOCK_DGRAM
    ) as sender:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(2)
        sender.sendto(b"ping", receiver.getsockname())
        assert receiver.recv(16) == b"ping"
        sender.connect(("127.0.0.2", 9))  # all of 127.0.0.0/8 is loopback
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
        server.bind(path)
        server.listen()
        client.connect(path)
    assert socket.getaddrinfo("localhost", 80)


async def test_guard_covers_asyncio_httpx_aiohttp_and_litellm(network_guard: NetworkGuard) -> None:
    attempts: list[tuple[str, Any]] = [
        ("asyncio ip", lambda: asyncio.open_connection("10.1.2.3", 80)),
        ("asyncio dns", lambda: asyncio.open_connection("example.com", 80)),
        ("httpx", lambda: _httpx_get("http://10.1.2.3:8080/")),
        ("aiohttp", lambda: _aiohttp_get("http://example.com/")),
        ("litellm", lambda: litellm.acompletion(
            model="openai/fake-model", api_base="http://10.1.2.3:8080/v1", api_key="sk-test",
            messages=USER, num_retries=0, max_retries=0, timeout=5,
        )),
    ]
    for label, attempt in attempts:
        before = len(network_guard.refused)
        started = time.monotonic()
        with pytest.raises(BaseException) as caught:  # libraries wrap it differently
            await attempt()
        assert _guard_error_in(caught.value), (label, _describe(caught.value))
        assert len(network_guard.refused) > before, label
        assert time.monotonic() - started < 4.5, label  # refused at once, not a timed-out attempt (5 s)


async def test_loopback_clients_and_servers_still_work(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    # litellm through "localhost"
    port = fake_llm.base_url.rsplit(":", 1)[1].split("/")[0]
    response = await litellm.acompletion(
        model="openai/fake-model", api_base=f"http://localhost:{port}/v1", api_key="sk-test",
        messages=USER, num_retries=0, max_retries=0,
    )
    assert response.choices[0].message.content == "echo: hi there"

    # uvicorn serving, httpx calling
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"uvicorn ok"})

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):  # up to ~5 s for uvicorn to bind
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "uvicorn did not start under the network guard"
        uv_port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://localhost:{uv_port}/")).text == "uvicorn ok"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 5)

    # aiohttp over a unix socket
    web_app = web.Application()
    web_app.router.add_get("/", lambda request: _text("unix ok"))
    runner = web.AppRunner(web_app)
    await runner.setup()
    path = str(tmp_path / "web.sock")
    await web.UnixSite(runner, path).start()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
            async with session.get("http://unix/") as reply:
                assert await reply.text() == "unix ok"
    finally:
        await runner.cleanup()


# ----------------------------------------------------------------------------- helpers


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": {}},
        },
    }


async def _text(body: str) -> web.Response:
    return web.Response(text=body)


async def _httpx_get(url: str) -> None:
    async with httpx.AsyncClient() as client:
        await client.get(url)


async def _aiohttp_get(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        await session.get(url)


def _guard_error_in(exc: BaseException | None, depth: int = 0) -> bool:
    """Is a NetworkAccessRefused anywhere in exc's cause/context chain or exception groups?"""
    if exc is None or depth > 20:
        return False
    if isinstance(exc, NetworkAccessRefused):
        return True
    if isinstance(exc, BaseExceptionGroup) and any(
        _guard_error_in(inner, depth + 1) for inner in exc.exceptions
    ):
        return True
    return _guard_error_in(exc.__cause__ or exc.__context__, depth + 1)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
