"""The one place lucidgate calls a model: litellm ``acompletion`` with our own retries.

litellm and the OpenAI SDK retry on their own by default, which hides timing and request
counts; we turn both off (``num_retries=0``, ``max_retries=0``) and back off here, with a
base delay tests can shrink (DESIGN §8, §11). litellm is imported lazily — it costs
seconds — and only after ``LITELLM_LOCAL_MODEL_COST_MAP`` is set so it never phones home.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from lucidgate.config.backoff import backoff_delay
from lucidgate.config.schema import Config, ProviderConfig
from lucidgate.gateway._offline import import_litellm
from lucidgate.gateway.errors import BudgetExceeded, ContextOverflowError, LLMError
from lucidgate.gateway.model.configured import provider_configured
from lucidgate.gateway.model.fallback import ModelChain
from lucidgate.gateway.model.reasoning import strip_thinking, visible_so_far
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.model.usage import UsageLedger
from lucidgate.memory.calibration import TokenCalibration
from lucidgate.memory import tokens
from lucidgate.gateway.model.errors import (failure_name, is_overflow, is_transient, provider_detail, retry_after_s,
                                            user_message)
from lucidgate.memory.protocols import ChatResult, ToolCall, Usage

logger = logging.getLogger(__name__)


def _compatible_route(model: str, provider: str) -> str:
    """``openai/<m>`` on a self-hosted OpenAI-compatible server goes through litellm's plain
    httpx route (``hosted_vllm/<m>``) instead of the OpenAI SDK, whose request transform
    walks every message of every request in Python — O(prompt) CPU per turn, ~8x the cost
    of the whole call on a long chat. Same wire format; hosted OpenAI keeps the SDK."""
    if provider == "openai" and model.startswith("openai/"):
        return "hosted_vllm/" + model.removeprefix("openai/")
    return model


class _LLMThread:
    """An event loop on its own thread for litellm calls.

    Building a request costs litellm and the OpenAI SDK several ms of pure-Python work
    per call; on the gateway's loop that stalls every channel and webhook while 20
    sessions talk at once. Here it only competes for the GIL, which Python hands over
    every few ms, so the main loop stays responsive. Cancellation propagates: cancelling
    the awaiting task cancels the call on this loop.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="llm-io", daemon=True)
        self._thread.start()

    async def run(self, coro: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    def close(self) -> None:
        if not self.loop.is_running():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout=5)
        except Exception:  # noqa: BLE001 — best effort at shutdown
            logger.debug("LLM thread tasks did not cancel cleanly", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


class SharedLLMIO:
    """One LLM I/O thread for the model clients of every agent of a gateway (issue 41): the
    first client to start opens it, the last to close closes it. Each agent keeps its own
    client (its model, fallbacks, usage ledger); their calls share this loop, its thread and
    litellm's connection pools, so ten agents run one thread, not ten."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: _LLMThread | None = None
        self._users = 0

    def open(self) -> _LLMThread:
        with self._lock:
            if self._thread is None:
                self._thread = _LLMThread()
            self._users += 1
            return self._thread

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._thread is None:
                return
            thread, self._thread = self._thread, None
        thread.close()


class LiteLLMChatModel:
    """Implements ``memory.protocols.ChatModel`` over litellm."""

    def __init__(self, config: Config, *, usage: UsageLedger | None = None,
                 metrics: Metrics | None = None, chain: ModelChain | None = None,
                 calibration: TokenCalibration | None = None, io: SharedLLMIO | None = None) -> None:
        """``io``: the I/O thread shared with the other agents' clients (else one of its own)."""
        self._config = config
        self._chain = chain  # fallbackModels / modelPresets (gateway/model/fallback.py)
        self._usage = usage
        self._metrics = metrics
        self.calibration = calibration
        self._litellm: Any = None
        self._shared_io = io if io is not None else SharedLLMIO()
        self._io: _LLMThread | None = None

    @property
    def model(self) -> str:
        return self._config.agent.model

    def configured(self) -> tuple[bool, str]:
        """Whether a provider is usable, and if not, what the user should do."""
        return provider_configured(self._config, self.model)

    def _client(self) -> Any:
        if self._litellm is None:
            self._litellm = import_litellm()
        return self._litellm

    def _call_kwargs(self) -> dict[str, Any]:
        agent = self._config.agent
        name, provider = self._config.provider_for(agent.model)
        kwargs: dict[str, Any] = {
            "model": agent.model,
            "timeout": agent.llm_timeout_s,
            "num_retries": 0,
            "max_retries": 0,
            # litellm routes any call with tools through its MCP bridge, which imports the
            # optional `mcp` package and fails without it; our tools are plain functions.
            "_skip_mcp_handler": True,
        }
        if provider is not None:
            key = provider.api_key.get_secret_value()
            if key:
                kwargs["api_key"] = key
            elif provider.api_base:
                kwargs["api_key"] = "sk-no-key"  # local servers ignore it; the SDK insists on one
            if provider.api_base:
                kwargs["api_base"] = provider.api_base
                kwargs["model"] = _compatible_route(agent.model, name)
            if provider.extra_headers:
                kwargs["extra_headers"] = dict(provider.extra_headers)
        return kwargs

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        job: str,
        session_key: str | None = None,
        max_tokens: int | None = None,
        on_text: TextCallback | None = None,
        retries: int | None = None,
    ) -> ChatResult:
        """One completion, checked. With ``on_text`` the answer is streamed and ``on_text``
        gets the text so far (at most every ``STREAM_INTERVAL_S``) on the caller's loop —
        unless tools are sent to a provider not known to stream tool calls.

        Transient failures are retried ``retries`` times (default ``llmRetries``); a failed
        stream falls back to one non-streamed call; an empty answer (no text, no tool calls)
        is asked again once, then raises ``LLMError``.
        """
        refusal = self._usage.refusal() if self._usage is not None else None
        if refusal is not None:
            raise BudgetExceeded(refusal)
        litellm = await asyncio.to_thread(self._client) if self._litellm is None else self._litellm
        agent = self._config.agent
        provider_name, provider = self._config.provider_for(agent.model)
        kwargs = self._call_kwargs()
        kwargs["messages"] = _wire_messages(messages)
        kwargs["max_tokens"] = max_tokens or agent.max_completion_tokens
        if tools:
            kwargs["tools"] = tools
            tool_choice = provider.tool_choice if provider is not None else "auto"
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        # Fallback models and per-session presets go through gateway/model/fallback.py's chain.
        client = litellm
        if self._chain is not None and self._chain.needed():
            client = self._chain.client(litellm, session_key)
        stream = on_text is not None and (not tools or _streams_tool_calls(provider))
        retries_left = agent.llm_retries if retries is None else retries
        attempt = 0
        asked_again = False
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                if self._io is None:
                    self._io = self._shared_io.open()
                if stream and on_text is not None:
                    relay = _progress_relay(on_text, asyncio.get_running_loop())
                    response = await self._io.run(_streamed(client, kwargs, relay))
                else:
                    response = await self._io.run(client.acompletion(**kwargs))
                result = _to_result(response)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._record_failure(job)
                detail = provider_detail(exc)
                if is_overflow(exc):
                    raise ContextOverflowError(
                        f"the {job} request is too long for the model's context window "
                        "(agents.defaults.contextWindowTokens)", detail=detail
                    ) from exc
                call = _describe_call(job, agent.model, session_key)
                if stream:
                    logger.warning("streamed %s failed (%s: %s); trying once without streaming",
                                   call, failure_name(exc), detail)
                    stream = False
                    continue
                if retries_left > 0 and is_transient(exc):
                    retries_left -= 1
                    asked = retry_after_s(exc)
                    delay = asked if asked is not None else backoff_delay(attempt, agent.llm_retry_base_delay_s)
                    logger.warning("LLM %s failed (%s: %s), retrying in %.2fs (%d left)",
                                   call, failure_name(exc), detail, delay, retries_left)
                    await asyncio.sleep(delay)
                    continue
                logger.warning("LLM %s failed: %s: %s", call, failure_name(exc), detail)
                api_base = provider.api_base if provider is not None else None
                raise LLMError(user_message(exc, provider_name, api_base), detail=detail) from exc
            logger.debug("LLM %s call took %.2fs", job, time.monotonic() - started)
            self._record_success(job, session_key, result.usage, getattr(client, "answered_by", None))
            self._calibrate(messages, tools, result.usage)
            if (result.content or "").strip() or result.tool_calls or result.cut:
                return result
            if not asked_again:
                asked_again = True
                logger.warning("the model gave an empty %s answer (finish_reason %s); asking again",
                               job, result.finish_reason)
                stream = False
                continue
            raise LLMError(
                "the model gave an empty answer twice (no text, no tool call); try again, or "
                "check the model and its server", detail=f"finish_reason: {result.finish_reason}")

    async def start(self) -> None:
        """Warm up before the gateway takes messages: import litellm (seconds, in a worker
        thread, never on the loop) and open the LLM I/O thread, so the first turn pays neither."""
        if self._litellm is None:
            self._litellm = await asyncio.to_thread(import_litellm)
        if self._io is None:
            self._io = await asyncio.to_thread(self._shared_io.open)

    async def warm_up(self) -> None:
        """Run litellm's first-call set-up (it imports hundreds of modules lazily) with a mock
        answer: nothing leaves the process and no tokens are spent. For timing a real call."""
        await self.start()
        assert self._litellm is not None and self._io is not None
        kwargs = {**self._call_kwargs(), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                  "mock_response": "ok"}
        try:
            await self._io.run(self._litellm.acompletion(**kwargs))
        except Exception as exc:  # the real call that follows reports any problem properly
            logger.debug("litellm warm-up failed: %s", exc)

    def close(self) -> None:
        """Stop the LLM I/O thread, or leave it to the last agent's client when it is shared
        (the gateway calls this on shutdown)."""
        if self._io is not None:
            self._io = None
            self._shared_io.release()

    async def settle(self) -> None:
        """Let background work started by calls (token calibration) finish; before ``close``."""
        if self.calibration is not None:
            await self.calibration.settled()

    def _calibrate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   usage: Usage) -> None:
        """Teach the token calibration what the provider counted for this request."""
        # Only where the tokenizer is loaded: a short-lived process whose prompts were too small
        # to count does not load it (~40 MB) for one sample; the daemon samples every call.
        if self.calibration is not None and usage.prompt_tokens > 0 and tokens.loaded():
            self.calibration.observe_request(self.model, list(messages), tools, usage.prompt_tokens)

    def _record_failure(self, job: str) -> None:
        if self._metrics is not None:
            self._metrics.llm_call(job, "error")

    def _record_success(self, job: str, session_key: str | None, usage: Usage,
                        model: str | None = None) -> None:
        if self._metrics is not None:
            self._metrics.llm_call(job, "ok", usage.prompt_tokens, usage.completion_tokens,
                                   usage.cached_tokens)
        if self._usage is not None:
            self._usage.record(job=job, session_key=session_key, model=model or self.model, usage=usage)


TextCallback = Callable[[str], Coroutine[Any, Any, None]]
STREAM_INTERVAL_S = 0.25  # the terminal wants it smooth; chat platforms throttle their own edits


def _progress_relay(on_text: TextCallback, loop: asyncio.AbstractEventLoop) -> Callable[[str], None]:
    """Hand text from the LLM thread to ``on_text`` on the caller's loop, rate-limited."""
    last = 0.0

    def relay(text: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= STREAM_INTERVAL_S:
            last = now
            loop.call_soon_threadsafe(lambda: loop.create_task(on_text(text)))

    return relay


async def _streamed(litellm: Any, kwargs: dict[str, Any], relay: Callable[[str], None]) -> Any:
    """Stream a completion, relaying the growing text, and rebuild the full response."""
    stream = await litellm.acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
    chunks = []
    text = ""
    async for chunk in stream:
        chunks.append(chunk)
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and getattr(delta, "content", None):
            text += delta.content
            shown = visible_so_far(text)
            if shown and not getattr(delta, "tool_calls", None):
                relay(shown)
    return litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])


def _streams_tool_calls(provider: ProviderConfig | None) -> bool:
    if provider is None or provider.stream_tool_calls is None:
        return provider is None or not provider.api_base
    return provider.stream_tool_calls


def _wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every assistant message carries ``content`` (``""`` when empty): some servers answer
    HTTP 500 to a tool-call message without it, and litellm drops a ``None``."""
    if all(m.get("content") is not None or m.get("role") != "assistant" for m in messages):
        return messages
    return [{**m, "content": ""} if m.get("role") == "assistant" and m.get("content") is None else m
            for m in messages]


def _to_result(response: Any) -> ChatResult:
    choice = response.choices[0]
    message = choice.message
    calls = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = call.function
        arguments = function.arguments
        if not isinstance(arguments, str):
            import json

            arguments = json.dumps(arguments)
        calls.append(ToolCall(id=call.id or f"call_{i}", name=function.name or "", arguments=arguments or ""))
    usage_obj = getattr(response, "usage", None)
    usage = Usage()
    if usage_obj is not None:
        details = getattr(usage_obj, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", 0) if details is not None else 0
        usage = Usage(
            prompt_tokens=int(getattr(usage_obj, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage_obj, "completion_tokens", 0) or 0),
            cached_tokens=int(cached or 0),
        )
    return ChatResult(
        content=strip_thinking(message.content),
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=getattr(choice, "finish_reason", None),
    )


def _describe_call(job: str, model: str, session_key: str | None) -> str:
    """``turn call to openai/x for telegram:42``: which call failed, in a log line."""
    return f"{job} call to {model}" + (f" for {session_key}" if session_key else "")
