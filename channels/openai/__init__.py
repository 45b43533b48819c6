"""An OpenAI-compatible endpoint: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any OpenAI client can talk to the assistant as if it were a model — with its memory, tools
and sessions. The endpoint is a channel named ``openai``: it publishes an
``InboundMessage`` on the bus exactly like the webhook does and waits for the answer, so the
same agent loop, access rules and transcripts apply.

- Auth: ``Authorization: Bearer <channels.openai.token>`` (the webhook's integration token
  when that is empty), checked in constant time before the body is read. Callers are guests
  unless ``channels.openai.owner`` is true.
- Limits: the webhook's (``channels.webhook.rateLimit*PerMin``), and the same buckets when both
  endpoints run — per session id inside the credential's, per credential, and global — so the
  integration token buys no more calls here than on ``/v1/messages``; over a limit is 429 with
  ``Retry-After``. A guest's turns are paid from the credential's share of the guests' budget.
- Session: ``X-Session-Id`` header, else the request's ``user`` field, else ``default``; the
  session key is ``openai:<id>``. The gateway keeps the history, so only the LAST user
  message of ``messages`` is new input; the rest of the client's list is ignored.
- ``stream: true`` answers as server-sent ``chat.completion.chunk`` events ending in
  ``data: [DONE]``; the role chunk goes out at once, the text when the turn has produced it.
- ``usage`` is the turn's tokens, summed over its model calls (a streamed answer carries it in
  a last chunk when ``stream_options.include_usage`` asks, as OpenAI's does).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from lucidgate.channels._ratelimit import DeliveryFailed
from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.messages import InboundMessage, OutboundMessage, TurnUsage
from lucidgate.channels.webhook.api import WebhookRateLimits, guarded_route
from lucidgate.channels.waiters import AnsweringChannel
from lucidgate.channels.webhook.auth import TOKEN_SETTING, fingerprint, spender_of
from lucidgate.config.schema import OPENAI_GUEST_ID, OPENAI_OWNER_ID, Config, OpenAIApiConfig, WebhookConfig

logger = logging.getLogger(__name__)

CHANNEL = "openai"
MODEL_ID = "lucidgate"
CHUNK_CHARS = 200
OWN_TOKEN_SETTING = "channels.openai.token"
_SESSION_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The fields we read; everything else an OpenAI client sends is accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = MODEL_ID
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    """OpenAI's error shape, so OpenAI clients raise their usual exception classes."""

    error: ErrorDetail


def _doc(text: str) -> dict[str, Any]:
    return {"model": OpenAIErrorBody, "description": text}


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _doc("Missing or wrong bearer token."),
    503: _doc("No token is configured, the gateway is shutting down, or the queue is full."),
}
CHAT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    400: _doc("No user message with text, or a bad session id."),
    413: _doc("The body is larger than channels.openai.maxBodyBytes."),
    429: _doc("Too many requests: for this session id, with this token or in all (the webhook's "
              "rateLimitPerMin, rateLimitPerCredentialPerMin, rateLimitGlobalPerMin); see Retry-After."),
    502: _doc("The turn failed (the model provider failed); `error.message` says why."),
    504: _doc("No answer within channels.openai.waitTimeoutS; the answer stays in the session."),
}


def openai_error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}}, status)


def _text_of(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [str(p.get("text", "")) for p in content or [] if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(p for p in parts if p)


class Answer(NamedTuple):
    """What a waiting request gets: the turn's text (or error) and the tokens it used."""

    ok: bool
    text: str
    usage: TurnUsage | None


class OpenAIChannel(AnsweringChannel[Answer]):
    """The ``openai`` channel: HTTP requests in, waiting futures resolved by the bus's replies."""

    name = CHANNEL

    def __init__(self, cfg: OpenAIApiConfig, bus: MessageBus, *, token: str,
                 limits: WebhookRateLimits | None = None, token_setting: str = OWN_TOKEN_SETTING) -> None:
        self.cfg = cfg
        super().__init__(bus)
        self._token = token
        self._token_fp = fingerprint(token)
        self._spender = spender_of(token_setting)
        self.intake_limits = limits or WebhookRateLimits.of(WebhookConfig())

    def share_intake_limits(self, limits: WebhookRateLimits) -> None:
        """Count against ``limits`` (the webhook's buckets) instead of our own."""
        self.intake_limits = limits

    def describe(self) -> str:
        role = "owner" if self.cfg.owner else "guest"
        return f"POST /v1/chat/completions ({role} access)" if self._token else "no token — answers 503"

    async def send(self, msg: OutboundMessage) -> None:
        if msg.kind not in ("text", "error"):
            return
        fut = self._waiters.take(msg.in_reply_to or "")
        if fut is not None and not fut.done():
            fut.set_result(Answer(msg.kind == "text", msg.text, msg.usage if msg.kind == "text" else None))
            return
        # The client is gone (or never asked: a reminder); the answer is in the session, and
        # the outbox counts it dead instead of retrying a send that has nowhere to go.
        raise DeliveryFailed(f"no OpenAI client is waiting for this answer in {msg.target.chat_id} "
                             "(it stays in the session transcript)", permanent=True)

    async def _publish(self, session: str, text: str) -> tuple[str, asyncio.Future[Answer]]:
        message_id = uuid.uuid4().hex
        fut = self._waiters.expect(message_id)
        sender = OPENAI_OWNER_ID if self.cfg.owner else OPENAI_GUEST_ID
        try:
            await self.bus.publish_inbound(InboundMessage(
                channel=self.name, chat_id=session, sender_id=sender, text=text,
                chat_type="private", message_id=message_id,
                role="owner" if self.cfg.owner else "guest", spender=self._spender))
        except BaseException:
            self._waiters.take(message_id)
            raise
        return message_id, fut

    def _authorize(self, header: str | None) -> Response | None:
        if not self._token:
            needs = ("channels.openai.token (with owner: true the webhook's integration token is not "
                     "accepted)" if self.cfg.owner else "channels.openai.token or channels.webhook.token")
            return openai_error(503, f"the OpenAI endpoint has no token (set {needs})", "server_error")
        if header and hmac.compare_digest(header.encode(), f"Bearer {self._token}".encode()):
            return None
        return openai_error(401, "missing or wrong bearer token", "authentication_error")

    def router(self) -> APIRouter:
        router = APIRouter(route_class=guarded_route(self._authorize, lambda: self.cfg.max_body_bytes),
                           tags=["openai"])

        @router.get("/v1/models", summary="The assistant, as a model an OpenAI client can pick",
                    responses=AUTH_RESPONSES)
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [
                {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "lucidgate"}]}

        @router.post("/v1/chat/completions", summary="Chat with the assistant (OpenAI-compatible)",
                     responses=CHAT_RESPONSES)
        async def completions(body: ChatRequest, request: Request) -> Response:
            session = request.headers.get("x-session-id") or body.user or "default"
            if not _SESSION_RE.match(session):
                return openai_error(400, "the session id (X-Session-Id or `user`) must be 1-200 "
                                         "printable characters")
            limited = self.intake_limits.take(self._token_fp, session)
            if limited is not None:
                wait_s, why = limited
                return JSONResponse({"error": {"message": why, "type": "rate_limit_error", "param": None,
                                               "code": "rate_limit_exceeded"}}, 429,
                                    headers={"Retry-After": str(max(1, math.ceil(wait_s)))})
            last = next((m for m in reversed(body.messages) if m.role == "user"), None)
            text = _text_of(last).strip() if last is not None else ""
            if not text:
                return openai_error(400, "no user message with text in `messages`")
            try:
                message_id, fut = await self._publish(session, text)
            except (BusClosed, BusFull) as exc:
                return openai_error(503, str(exc), "server_error")
            completion_id = f"chatcmpl-{message_id}"
            if body.stream:
                with_usage = bool((body.stream_options or {}).get("include_usage"))
                return StreamingResponse(self._stream(fut, completion_id, body.model, with_usage),
                                         media_type="text/event-stream",
                                         headers={"Cache-Control": "no-store", "X-Session-Id": session})
            try:
                answer = await asyncio.wait_for(asyncio.shield(fut), self.cfg.wait_timeout_s)
            except asyncio.TimeoutError:
                return openai_error(504, "the assistant did not answer in time; the answer stays in "
                                         "the session", "timeout")
            if not answer.ok:
                return openai_error(502, answer.text, "server_error")
            return JSONResponse(_completion(completion_id, body.model, answer.text, answer.usage),
                                headers={"X-Session-Id": session})

        return router

    async def _stream(self, fut: asyncio.Future[Answer], completion_id: str, model: str,
                      with_usage: bool) -> AsyncIterator[bytes]:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

        yield chunk({"role": "assistant", "content": ""})
        try:
            ok, reply, usage = await asyncio.wait_for(asyncio.shield(fut), self.cfg.wait_timeout_s)
        except asyncio.TimeoutError:
            ok, reply, usage = False, "the assistant did not answer in time; the answer stays in the session", None
        if not ok:
            error = {"error": {"message": reply, "type": "server_error", "param": None, "code": None}}
            yield f"data: {json.dumps(error)}\n\n".encode()
            return
        for start in range(0, len(reply), CHUNK_CHARS):
            yield chunk({"content": reply[start:start + CHUNK_CHARS]})
        yield chunk({}, "stop")
        if with_usage:  # OpenAI's stream_options.include_usage: one last chunk, no choices
            data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": _usage(usage)}
            yield f"data: {json.dumps(data)}\n\n".encode()
        yield b"data: [DONE]\n\n"


def _completion(completion_id: str, model: str, text: str, usage: TurnUsage | None) -> dict[str, Any]:
    return {
        "id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": _usage(usage),
    }


def _usage(usage: TurnUsage | None) -> dict[str, int]:
    """OpenAI's ``usage`` object. A turn may make several model calls (tools, retries): the
    counts are their sum."""
    used = usage or TurnUsage()
    return {"prompt_tokens": used.prompt_tokens, "completion_tokens": used.completion_tokens,
            "total_tokens": used.total_tokens}


def create_openai_channel(config: Config, bus: MessageBus) -> OpenAIChannel | None:
    """The channel when enabled; a guest endpoint's token falls back to the webhook's integration
    token. An owner endpoint (``owner: true``) needs its own: the integration token is not an
    owner credential (issue 11)."""
    cfg = config.channels.openai
    if not cfg.enabled:
        return None
    token, setting = cfg.token.get_secret_value(), OWN_TOKEN_SETTING
    if not token and not cfg.owner:
        token, setting = config.channels.webhook.token.get_secret_value(), TOKEN_SETTING
    return OpenAIChannel(cfg, bus, token=token, limits=WebhookRateLimits.of(config.channels.webhook),
                         token_setting=setting)


def build(config: Config, deps: ChannelDeps) -> OpenAIChannel:
    """The registry's factory (``channels/registry.py``): the channel is built only when enabled."""
    channel = create_openai_channel(config, deps.bus)
    if channel is None:
        raise ValueError("channels.openai is disabled")
    return channel
