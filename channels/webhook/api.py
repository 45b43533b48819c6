"""The HTTP surface of the webhook channel: request/response models and the route guard.

The models are what the OpenAPI schema shows, so they are the contract: unknown fields
are refused, ids are strings (``1`` is not ``"1"``), strings must be encodable (JSON
allows lone surrogates; files and the LLM API do not).

``guarded_route`` builds the route class every webhook route uses. It authenticates and
caps the body *before* FastAPI reads it: a dependency would run only after FastAPI had
already read and parsed the whole body, so an unauthenticated client could make us read
megabytes and be told about its JSON before being told about its token.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
import time
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal, Protocol

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.types import Message, Receive

from lucidgate.config.schema import WebhookConfig

# An oversized body is read and dropped up to this much, so the client sees the 413.
CHANNEL = "webhook"
SHUTTING_DOWN = "the gateway is shutting down; try again in a moment"

DISCARD_MAX_BYTES = 64 * 1024 * 1024
DISCARD_TIMEOUT_S = 10.0


def _encodable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


# Constraints before the validator: placed after it, pydantic enforces them but leaves them
# out of the JSON schema (the OpenAPI document would then under-state the contract).
_utf8 = AfterValidator(_encodable)
Id = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$"), _utf8]
Text = Annotated[str, Field(min_length=1, pattern=r"\S"), _utf8]  # not only whitespace
Key = Annotated[str, Field(min_length=1, max_length=256), _utf8]
Url = Annotated[str, Field(min_length=1, max_length=2048), _utf8]


class MessageRequest(BaseModel):
    """A message to the assistant. Unknown fields are refused; ids are strings."""

    model_config = ConfigDict(extra="forbid", strict=True)

    chat_id: Id = Field(description="Conversation id; the session is `webhook:<chat_id>`.")
    sender_id: Id = Field(description="Who is writing; a guest unless listed in channels.webhook.owners.")
    text: Text = Field(description="The message text.")
    idempotency_key: Key | None = Field(
        None, description="Same key within 24 h: the first result is returned, no second turn runs.")
    callback_url: Url | None = Field(
        None, description="Where the answer is POSTed (signed) when it is not returned in the response.")
    wait: bool = Field(True, description="Wait for the answer (up to waitTimeoutS) or return 202 at once.")
    stream: bool = Field(False, description="With wait=true: answer as server-sent events — `activity` "
                                            "(the tool that runs), `progress` (the answer so far), then one "
                                            "`reply` event with the usual reply JSON (or `error`).")


class MessageReply(BaseModel):
    reply: str
    session: str
    message_id: str
    error: bool = Field(False, description="True when the turn failed; `reply` then says why.")


class MessageAccepted(BaseModel):
    status: Literal["accepted"] = "accepted"
    session: str
    message_id: str


class ErrorBody(BaseModel):
    detail: str
    session: str | None = None
    message_id: str | None = None


class SessionSummary(BaseModel):
    key: str
    chat_id: str
    created_at: str | None = None
    updated_at: str | None = None


class SessionList(BaseModel):
    sessions: list[SessionSummary]


class SessionMessage(BaseModel):
    role: str
    content: str
    timestamp: str | None = None


class SessionDetail(BaseModel):
    key: str
    pending: bool
    messages: list[SessionMessage]


class SessionsView(Protocol):
    """Read access to transcripts, handed in by the composition root (channels know no memory)."""

    async def list(self, prefix: str, limit: int) -> list[dict[str, Any]]: ...

    async def recent(self, key: str, limit: int) -> dict[str, Any] | None: ...

    async def said(self, key: str, after: int, limit: int) -> builtins.list[dict[str, Any]] | None: ...

    def for_agent(self, agent: str) -> SessionsView | None:
        """Agent ``agent``'s transcripts ("" or the default's id: these); None for no such agent."""
        ...

    @property
    def agents(self) -> builtins.list[str]:
        """The ids of the other agents (not the default), whose keys start with ``<id>:``."""
        ...

    @property
    def default(self) -> str:
        """The default agent's id."""
        ...


def doc(description: str, model: type[BaseModel] = ErrorBody) -> dict[str, Any]:
    return {"model": model, "description": description}


AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: doc("Missing, malformed or wrong bearer token."),
    503: doc("The webhook is disabled (no token configured), the gateway is shutting down, "
             "or the queue is full."),
}
BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    413: doc("The body is larger than channels.webhook.maxBodyBytes, or the text longer than "
             "agents.defaults.maxMessageChars."),
}

# Documents the scheme in OpenAPI; the check itself is in the route guard.
bearer_scheme = HTTPBearer(auto_error=False, description="channels.webhook.token")


def error_response(status: int, detail: str, *, headers: dict[str, str] | None = None,
                   **extra: str) -> JSONResponse:
    return JSONResponse(ErrorBody(detail=detail, **extra).model_dump(exclude_none=True),
                        status_code=status, headers=headers)


class SenderRateLimiter:
    """A token bucket per sender: ``per_min`` messages a minute, bursts up to that many."""

    def __init__(self, per_min: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_min)
        self.rate = per_min / 60.0
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def wait(self, key: str) -> float:
        """0 when ``key`` may send now, else the seconds until it may (nothing is taken)."""
        now = self._clock()
        tokens, last = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - last) * self.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def take(self, key: str) -> float:
        """0 when allowed (one message is taken), else how many seconds until the sender may
        send again."""
        now = self._clock()
        tokens, last = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - last) * self.rate)
        if len(self._buckets) > 10_000:  # forget senders whose bucket is full again
            self._buckets = {k: v for k, v in self._buckets.items()
                             if v[0] + (now - v[1]) * self.rate < self.capacity}
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate


class WebhookRateLimits:
    """Three buckets a message must all pass: its sender's (within its credential), its
    credential's (however many sender ids it names) and the gateway's (every credential).

    A ``sender_id`` is chosen by the caller, so a per-sender limit alone is no limit: the
    credential and global buckets are what a caller cannot multiply. A refused message takes
    from no bucket."""

    def __init__(self, *, per_sender: int, per_credential: int, per_gateway: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = (
            ("rateLimitPerMin", "this sender", per_sender, SenderRateLimiter(per_sender, clock=clock)),
            ("rateLimitPerCredentialPerMin", "this token", per_credential,
             SenderRateLimiter(per_credential, clock=clock)),
            ("rateLimitGlobalPerMin", "all callers together", per_gateway, SenderRateLimiter(per_gateway, clock=clock)),
        )

    @classmethod
    def of(cls, cfg: WebhookConfig) -> WebhookRateLimits:
        """The limits ``channels.webhook`` sets (they apply to every credential-taking endpoint)."""
        return cls(per_sender=cfg.rate_limit_per_min, per_credential=cfg.rate_limit_per_credential_per_min,
                   per_gateway=cfg.rate_limit_global_per_min)

    def take(self, credential_fp: str, sender_id: str) -> tuple[float, str] | None:
        """None when the message may pass (taken from every bucket), else (seconds to wait,
        the refusal naming the limit that was hit)."""
        keys = (f"{credential_fp}\x1f{sender_id}", credential_fp, "*")
        for (setting, who, per_min, bucket), key in zip(self.limits, keys, strict=True):
            wait = bucket.wait(key)
            if wait > 0:
                return wait, (f"too many messages from {who}: the limit is {per_min} a minute "
                              f"(channels.webhook.{setting})")
        for (_, _, _, bucket), key in zip(self.limits, keys, strict=True):
            bucket.take(key)
        return None


def _capped(receive: Receive, limit: int) -> Receive:
    total = 0

    async def receive_capped() -> Message:
        nonlocal total
        message = await receive()
        if message["type"] == "http.request":
            total += len(message.get("body", b""))
            if total > limit:
                raise HTTPException(413, f"the body is over {limit:,} bytes (channels.webhook.maxBodyBytes)")
        return message

    return receive_capped


async def discard_body(receive: Receive) -> None:
    """Read and drop the rest of an oversized body so the client can read our 413.

    Closing with unread data in the socket makes the kernel send a reset, which destroys the
    response in flight. Bounded in bytes and time; past that the connection just closes.
    """
    async def drain() -> None:
        budget = DISCARD_MAX_BYTES
        while budget > 0:
            message = await receive()
            if message["type"] != "http.request":
                return
            budget -= len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    try:
        await asyncio.wait_for(drain(), DISCARD_TIMEOUT_S)
    except (TimeoutError, OSError):
        pass


async def client_gone(receive: Receive) -> None:
    """Returns when the client disconnects (call only after the body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def guarded_route(authorize: Callable[[str | None], Response | None],
                  max_body: Callable[[], int]) -> type[APIRoute]:
    """A route class that authenticates, then caps the streamed body, before FastAPI reads it."""

    class WebhookRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                refusal = authorize(request.headers.get("authorization"))
                if refusal is not None:
                    return refusal
                limit = max_body()
                declared = request.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    if int(declared) <= DISCARD_MAX_BYTES:
                        await discard_body(request.receive)
                    return error_response(413, f"the body is {int(declared):,} bytes; the limit is {limit:,} "
                                               "(channels.webhook.maxBodyBytes)", headers={"Connection": "close"})
                try:
                    return await handler(Request(request.scope, _capped(request.receive, limit)))
                except HTTPException as exc:
                    if exc.status_code != 413:
                        raise
                    await discard_body(request.receive)
                    return error_response(413, str(exc.detail), headers={"Connection": "close"})

            return guarded

    return WebhookRoute


def request_fingerprint(chat_id: str, sender_id: str, text: str) -> str:
    """What an idempotency key is bound to: the same key with other content is a conflict."""
    return hashlib.sha256(json.dumps([chat_id, sender_id, text]).encode("utf-8")).hexdigest()


# A turn that failed (the model down, a crash) is the server's failure, not a reply: 502, so
# a client, a retry policy or a monitor that looks at the status sees it. The body is the
# same reply JSON, with the words for the user in ``reply``.
TURN_FAILED = 502


def reply_response(text: str, session: str, message_id: str, is_error: bool) -> JSONResponse:
    return JSONResponse(MessageReply(reply=text, session=session, message_id=message_id, error=is_error)
                        .model_dump(), status_code=TURN_FAILED if is_error else 200)


# The documented answers of POST /v1/messages (the OpenAPI page and the schemathesis fuzz read them).
MESSAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS, **BODY_ERRORS,
    200: {"description": "The reply; with stream=true, server-sent events: `activity` "
                         "and `progress` previews, then `reply` (this JSON) or `error`.",
          "content": {"text/event-stream": {}}},
    202: doc("Accepted (wait=false); the answer goes to callback_url.", MessageAccepted),
    403: doc("The chat belongs to another role (owner vs guest); use another chat_id."),
    409: doc("idempotency_key was used for a different message within 24 h."),
    TURN_FAILED: doc("The turn failed (the model provider down, a crash): the reply JSON with "
                     "`error: true`, `reply` saying why. The message is kept; send it again later.",
                     MessageReply),
    429: doc("Too many messages: from this sender (rateLimitPerMin), with this token "
             "(rateLimitPerCredentialPerMin) or in all (rateLimitGlobalPerMin)."),
    504: doc("No answer within waitTimeoutS; the message stays queued and its "
             "answer goes to callback_url if given."),
}
