"""An OpenAI-compatible chat-completions server on loopback, scripted by tests.

Every test that needs "the LLM" goes through litellm's real HTTP path to this server
(``model="openai/fake-model"``, ``api_base=server.base_url``), so request shaping, response
parsing, streaming and error mapping are exercised exactly as in production. Responses are
scripted with small frozen dataclasses queued FIFO; when the queue is empty ``default``
answers (an echo of the last user message).

    async with FakeLLMServer() as llm:
        llm.queue(ToolCalls([("read_file", {"path": "a.md"})]), Reply("done"))
        ...
        assert llm.requests[1]["messages"][-1]["role"] == "tool"
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = [
    "AfterRequests",
    "ContextOverflow",
    "Cut",
    "Empty",
    "Fail",
    "FakeLLMServer",
    "Func",
    "Hang",
    "Reply",
    "Scripted",
    "Strictness",
    "ToolCalls",
]

MODEL_ID = "fake-model"

# The error "type" per status. litellm reads "invalid_request_error" as a bad request
# before it looks at the status, so only 400/422 carry it.
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True, slots=True)
class Reply:
    """A plain assistant answer. Token counts default to a rough size-based estimate."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """An assistant message with ``tool_calls``; a ``str`` argument is sent verbatim."""

    calls: list[tuple[str, dict[str, Any] | str]]
    text: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Fail:
    """An HTTP error with an OpenAI-style ``{"error": {...}}`` body.

    ``error_type`` defaults to the type OpenAI uses for the status. Note that litellm maps
    by message text before status: a message mentioning "rate limit" or "maximum context
    length" picks RateLimitError / ContextWindowExceededError whatever the status.
    """

    status: int = 500
    message: str = "internal error"
    code: str | None = None
    error_type: str | None = None
    headers: dict[str, str] | None = None  # e.g. {"Retry-After": "1"} on a 429


@dataclass(frozen=True, slots=True)
class ContextOverflow:
    """The 400 an OpenAI-compatible server sends when the prompt exceeds the window."""

    max_tokens: int = 8192
    requested: int = 9000


@dataclass(frozen=True, slots=True)
class Hang:
    """Sleep ``seconds`` before answering "late" — for client timeouts and /stop."""

    seconds: float


@dataclass(frozen=True, slots=True)
class HeldReply:
    """An answer that stops after its first streamed piece until ``release`` is set — so a
    test can see a preview on screen before the rest arrives (unstreamed: waits, then all)."""

    text: str
    release: threading.Event


@dataclass(frozen=True, slots=True)
class AfterRequests:
    """Answer ``reply`` only once the server has received ``count`` requests in all: a barrier,
    so two of these are answered only if both requests are in flight at the same time. After
    ``timeout`` s without them it answers 500, and the test sees an error instead of hanging."""

    count: int
    reply: Reply | ToolCalls
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class Func:
    """Compute the response from the parsed request body (may return another Func)."""

    fn: Callable[[dict[str, Any]], Scripted]


Scripted = Reply | ToolCalls | Fail | ContextOverflow | Hang | HeldReply | AfterRequests | Func


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message, whether ``content`` is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


class FakeLLMServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 and a free port.

    Use it as an async context manager on the test's loop (the ``fake_llm`` fixture), or
    with ``start_in_thread()``/``stop_thread()`` when the client lives in a subprocess or
    a synchronous script. ``queue()`` may be called from any thread.
    """

    def __init__(self, *, latency: float = 0.0) -> None:
        self.latency = latency
        self.base_url = ""
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # per request, names lower-cased
        self.default: Callable[[dict[str, Any]], Scripted] = self._echo
        self.strict = Strictness()  # llama-cpp-python's strictness, switched on per test
        # The swayed model: obey "RUN: <command>" lines found in tool results ("tool results")
        # or in anything it reads ("anywhere") by calling exec, once per command. None: off.
        self.obey: str | None = None
        self._script: collections.deque[Scripted] = collections.deque()
        self._call_ids = itertools.count(1)  # call_<n>, unique over the server's life
        self._completion_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._arrived: asyncio.Condition | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # ----------------------------------------------------------------- scripting
    def queue(self, *responses: Scripted) -> None:
        """Append scripted responses; each request consumes one, oldest first."""
        self._script.extend(responses)

    @property
    def pending(self) -> int:
        """How many queued responses have not been consumed yet."""
        return len(self._script)

    def last_user_text(self, request: dict[str, Any] | None = None) -> str:
        """Text of the last user message of ``request`` (default: the latest request)."""
        if request is None:
            if not self.requests:
                raise AssertionError("the fake LLM has received no request yet")
            request = self.requests[-1]
        for message in reversed(request.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                return message_text(message)
        return ""

    def _echo(self, request: dict[str, Any]) -> Scripted:
        return Reply(f"echo: {self.last_user_text(request)}")

    async def wait_for_requests(self, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count`` requests have arrived (only on the server's own loop)."""
        if self._arrived is None:
            raise RuntimeError("FakeLLMServer is not started")
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.requests) >= count), timeout
            )

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> FakeLLMServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
        app.router.add_get("/stats", self._stats)
        # handler_cancellation: a client that gives up on a Hang must not keep stop() waiting.
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            site = web.SockSite(runner, sock)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._runner = runner
        self._arrived = asyncio.Condition()
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeLLMServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def start_in_thread(self) -> FakeLLMServer:
        """Serve from a daemon thread with its own event loop; returns once listening."""
        if self._thread is not None:
            raise RuntimeError("FakeLLMServer thread already running")
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        thread = threading.Thread(target=serve, name="fake-llm", daemon=True)
        thread.start()
        if not started.wait(10) or failure:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
            raise RuntimeError(f"FakeLLMServer failed to start: {failure!r}")
        self._thread, self._thread_loop = thread, loop
        return self

    def stop_thread(self) -> None:
        thread, loop = self._thread, self._thread_loop
        if thread is None or loop is None:
            return
        self._thread = self._thread_loop = None
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    # ----------------------------------------------------------------- handlers
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "test"}]}
        )

    async def _stats(self, request: web.Request) -> web.Response:
        """What the requests so far carried, per request: the characters of the messages'
        text and of the tool schemas (as JSON) — a prompt's size, as benches report it."""
        sizes = [{"message_chars": sum(len(message_text(m)) for m in r.get("messages") or []
                                       if isinstance(m, dict)),
                  "tools_chars": len(json.dumps(r["tools"])) if r.get("tools") else 0,
                  "tools": len(r.get("tools") or [])} for r in self.requests]
        return web.json_response({"requests": len(self.requests), "sizes": sizes})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not valid JSON", "invalid_request_error", None)
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object", "invalid_request_error", None)
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()
        scripted: Scripted = self._script.popleft() if self._script else (
            swayed(body, self.obey) or self.default(body))
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        while isinstance(scripted, Func):
            scripted = scripted.fn(body)
        return await self._respond(request, body, scripted)

    async def _respond(
        self, request: web.Request, body: dict[str, Any], scripted: Scripted
    ) -> web.StreamResponse:
        if isinstance(scripted, Fail):
            fallback = "server_error" if scripted.status >= 500 else "invalid_request_error"
            kind = scripted.error_type or _ERROR_TYPES.get(scripted.status, fallback)
            return _error(scripted.status, scripted.message, kind, scripted.code, headers=scripted.headers)
        if isinstance(scripted, ContextOverflow):
            message = (
                f"This model's maximum context length is {scripted.max_tokens} tokens. "
                f"However, your messages resulted in {scripted.requested} tokens. "
                "Please reduce the length of the messages."
            )
            return _error(400, message, "invalid_request_error", "context_length_exceeded",
                          param="messages")
        if isinstance(scripted, AfterRequests):
            try:
                await self.wait_for_requests(scripted.count, scripted.timeout)
            except TimeoutError:
                return _error(500, f"only {len(self.requests)} of {scripted.count} requests arrived",
                              "server_error", None)
            scripted = scripted.reply
        if isinstance(scripted, Hang):
            await asyncio.sleep(scripted.seconds)
            scripted = Reply("late")
        if isinstance(scripted, HeldReply):
            hold = scripted.release
            message = {"role": "assistant", "content": scripted.text}
            usage = _usage(body, message, Reply(scripted.text))
            if body.get("stream"):
                return await self._stream(request, body, message, "stop", usage, hold=hold)
            await asyncio.to_thread(hold.wait, 120)
            return await self._answer(request, body, message, "stop", usage)
        strict = await strict_response(self, request, body, scripted)
        if strict is not None:
            return strict
        if not isinstance(scripted, (Reply, ToolCalls)):
            raise TypeError(f"not a scripted response: {scripted!r}")
        message, finish = self._message(scripted)
        usage = _usage(body, message, scripted)
        return await self._answer(request, body, message, finish, usage)

    async def _answer(self, request: web.Request, body: dict[str, Any], message: dict[str, Any],
                      finish: str, usage: dict[str, Any]) -> web.StreamResponse:
        if body.get("stream"):
            return await self._stream(request, body, message, finish, usage)
        return web.json_response(
            {
                "id": f"chatcmpl-{next(self._completion_ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or MODEL_ID),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": usage,
                "system_fingerprint": None,
            }
        )

    def _message(self, scripted: Reply | ToolCalls) -> tuple[dict[str, Any], str]:
        if isinstance(scripted, Reply):
            return {"role": "assistant", "content": scripted.text}, "stop"
        calls = [
            {
                "id": f"call_{next(self._call_ids)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for name, args in scripted.calls
        ]
        return {"role": "assistant", "content": scripted.text, "tool_calls": calls}, "tool_calls"

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        message: dict[str, Any],
        finish: str,
        usage: dict[str, Any],
        hold: threading.Event | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        base = {
            "id": f"chatcmpl-{next(self._completion_ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": str(body.get("model") or MODEL_ID),
        }

        async def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            chunk = {**base, "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        for i, piece in enumerate(_pieces(message.get("content") or "")):
            await send({"content": piece})
            if i == 0 and hold is not None:
                await asyncio.to_thread(hold.wait, 120)
        for index, call in enumerate(message.get("tool_calls") or []):
            await send({"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }]})
            for piece in _pieces(call["function"]["arguments"]):
                await send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        await send({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {**base, "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


_RUN = re.compile(r"RUN: ([^\n\\\"]+)")


def swayed(body: dict[str, Any], obey: str | None) -> Scripted | None:
    """An exec call for the first ``RUN: <command>`` the request shows the model (in tool
    results, or anywhere but its own messages) that it has not already asked to run."""
    if obey is None:
        return None
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if "exec" not in offered:
        return None
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    made = {json.loads(c["function"]["arguments"] or "{}").get("command")
            for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []
            if c.get("function", {}).get("name") == "exec"}
    readable = [m for m in messages if m.get("role") == "tool"] if obey == "tool results" else \
        [m for m in messages if m.get("role") != "assistant"]
    for message in readable:
        for command in _RUN.findall(message_text(message)):
            command = command.strip()
            if command and command not in made:
                return ToolCalls([("exec", {"command": command})])
    return None


def _pieces(text: str, size: int = 8) -> list[str]:
    """Split streamed text so clients really have to reassemble deltas."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(
    body: dict[str, Any], message: dict[str, Any], scripted: Reply | ToolCalls
) -> dict[str, Any]:
    prompt = scripted.prompt_tokens
    if prompt is None:
        prompt = len(json.dumps(body.get("messages") or [])) // 4
    completion = scripted.completion_tokens
    if completion is None:
        produced = message.get("content") or ""
        if message.get("tool_calls"):
            produced += json.dumps(message["tool_calls"])
        completion = len(produced) // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": scripted.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _error(
    status: int, message: str, kind: str, code: str | None, *, param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status=status, headers=headers,
    )


# --------------------------------------------------------------------------------------
# Strictness of a stock llama-cpp-python server (issue 18), each behind its own switch, and
# the scripted answers that real servers send but well-behaved ones rarely do. Kept in one
# block so other additions to this file merge cleanly.


@dataclass(slots=True)
class Strictness:
    """Switch on what a stock llama-cpp-python server does; all off by default.

    ``tools_need_tool_choice``: ``tools`` without ``tool_choice`` are ignored — a scripted
    ``ToolCalls`` is answered as plain text instead. ``content_required``: HTTP 500 when an
    assistant message with ``tool_calls`` has no ``content`` key (or ``null``).
    ``stream_fails_with_tools``: a streamed request carrying tools breaks mid-stream.
    """

    tools_need_tool_choice: bool = False
    content_required: bool = False
    stream_fails_with_tools: bool = False


@dataclass(frozen=True, slots=True)
class Cut:
    """An answer cut at the token limit: ``finish_reason: "length"``. ``calls`` are sent as
    given — a ``str`` argument may be cut-off JSON."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] | None = None


@dataclass(frozen=True, slots=True)
class Empty:
    """No text and no tool calls, with the given ``finish_reason`` (servers do send
    ``"tool_calls"`` with no calls)."""

    finish_reason: str = "stop"


async def strict_response(server: FakeLLMServer, request: web.Request, body: dict[str, Any],
                          scripted: Any) -> web.StreamResponse | None:
    """The answer a strict server gives instead of the scripted one, or None to answer as usual."""
    strict = server.strict
    if strict.content_required:
        for message in body.get("messages") or []:
            if message.get("role") == "assistant" and message.get("tool_calls") and message.get("content") is None:
                return _error(500, "Internal Server Error: assistant message with tool_calls has no "
                              "'content' (llama-cpp-python strictness)", "server_error", None)
    if strict.stream_fails_with_tools and body.get("stream") and body.get("tools"):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        first = {"id": "chatcmpl-broken", "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": MODEL_ID, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "finish_reason": None}]}
        await response.write(f"data: {json.dumps(first)}\n\n".encode())
        await response.write(b'data: {"error": {"message": "stream broke while generating tool calls", '
                             b'"type": "server_error"}}\n\n')
        await response.write_eof()
        return response
    message: dict[str, Any]
    if isinstance(scripted, ToolCalls) and strict.tools_need_tool_choice and body.get("tools") \
            and "tool_choice" not in body:
        message = {"role": "assistant", "content": scripted.text or "I would use a tool, but none was offered."}
        return await server._answer(request, body, message, "stop", _usage(body, message, Reply("")))
    if isinstance(scripted, Cut):
        message = {"role": "assistant", "content": scripted.text}
        if scripted.calls:
            message["tool_calls"] = server._message(ToolCalls(scripted.calls))[0]["tool_calls"]
        return await server._answer(request, body, message, "length", _usage(body, message, Reply("")))
    if isinstance(scripted, Empty):
        message = {"role": "assistant", "content": ""}
        return await server._answer(request, body, message, scripted.finish_reason,
                                    _usage(body, message, Reply("")))
    return None
