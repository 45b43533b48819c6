"""matrix-nio calls as exceptions, and how the outbound limiter treats their failures.

nio answers a failed request with an ``ErrorResponse`` value rather than an exception; the
limiter and the outbox work with exceptions. ``checked`` turns an error response into a
``MatrixCallError`` carrying the HTTP status, the Matrix ``errcode`` and ``retry_after_ms``,
and ``classify`` maps it to a verdict:

* 429 / ``M_LIMIT_EXCEEDED`` — wait ``retry_after_ms``, then the same call again;
* a 5xx, a refused or dropped connection, a timeout — retry. A message send is safe to
  repeat because it carries a transaction id: the homeserver answers a repeated
  ``PUT …/send/<txnId>`` with the event it already made instead of posting it twice;
* anything else (403 not in the room, 400 bad content, 404 unknown room) — no retry.

nio's own retry loops (429 and timeouts) are switched off in the client config, so these
are the only retries, visible and bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from nio import ErrorResponse

from lucidgate.channels._ratelimit import Verdict
from lucidgate.config.errors import LucidError

T = TypeVar("T")

RETRY_AFTER_DEFAULT_S = 5.0
_AUTH_ERRORS = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"})


class MatrixCallError(LucidError):
    """A Matrix API call the homeserver refused (``status`` is the HTTP status, if known)."""

    def __init__(self, what: str, status: int | None, errcode: str | None, message: str,
                 retry_after_ms: int | None = None) -> None:
        super().__init__(f"{what}: {status or '?'} {errcode or ''} {message}".strip())
        self.status = status
        self.errcode = errcode
        self.retry_after_ms = retry_after_ms

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.errcode == "M_LIMIT_EXCEEDED"

    @property
    def unauthorized(self) -> bool:
        return self.status == 401 or self.errcode in _AUTH_ERRORS

    @property
    def transient(self) -> bool:
        """Worth another try: rate limits, server errors, a token the server may accept again."""
        return self.rate_limited or self.unauthorized or self.status is None or self.status >= 500


def error_of(what: str, response: Any) -> MatrixCallError | None:
    """The error a nio response stands for, or None when it is a success."""
    if not isinstance(response, ErrorResponse):
        return None
    transport = getattr(response, "transport_response", None)
    status = getattr(transport, "status", None)
    return MatrixCallError(what, status, response.status_code, response.message or "", response.retry_after_ms)


async def checked(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call``; an error response is raised as ``MatrixCallError``."""
    response = await call()
    error = error_of(what, response)
    if error is not None:
        raise error
    return response


def classify(exc: BaseException) -> Verdict:
    """The limiter's verdict for a failed Matrix call (see the module docstring)."""
    if isinstance(exc, MatrixCallError):
        if exc.rate_limited:
            return Verdict.wait((exc.retry_after_ms or RETRY_AFTER_DEFAULT_S * 1000) / 1000)
        return Verdict.retry() if exc.status is None or exc.status >= 500 else Verdict.fail()
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | TimeoutError | ConnectionError):
        return Verdict.retry()
    return Verdict.fail()
