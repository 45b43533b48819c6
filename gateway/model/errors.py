"""What a failed model call means: worth a retry, a context overflow, or the user's to fix.

litellm maps every provider's errors onto OpenAI-style exception classes; this module turns
them into the three decisions the LLM client makes (retry, recover from overflow, give up)
and into one short sentence the user can act on, naming the config key to check.
"""

from __future__ import annotations

import re
from typing import Any

from lucidgate.gateway._offline import import_litellm

# A provider that asks for more than this is treated as down for now: the call fails with
# the usual "try again in a moment" rather than holding a turn for minutes.
MAX_RETRY_AFTER_S = 60.0


def _transient_classes() -> tuple[type[BaseException], ...]:
    ll = import_litellm()
    # litellm.Timeout derives from openai's connection error, not litellm's: listed apart.
    return (ll.RateLimitError, ll.APIConnectionError, ll.Timeout, ll.InternalServerError,
            ll.ServiceUnavailableError, ll.BadGatewayError)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _transient_classes()):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def is_overflow(exc: BaseException) -> bool:
    if isinstance(exc, import_litellm().ContextWindowExceededError):
        return True
    text = str(exc).lower()
    return "context_length_exceeded" in text or "maximum context length" in text


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a 429 (or 503) asked for, from ``retry-after-ms`` or ``retry-after`` (seconds);
    None when it gave none, or asked for more than ``MAX_RETRY_AFTER_S``."""
    # litellm keeps the provider's headers apart (``litellm_response_headers``); the
    # exception's own ``response`` carries them only on some routes.
    for headers in (getattr(exc, "litellm_response_headers", None),
                    getattr(getattr(exc, "response", None), "headers", None)):
        if not headers:
            continue
        lowered: dict[str, Any] = {str(k).lower(): v for k, v in dict(headers).items()}
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            try:
                value = float(str(lowered.get(name, "")).strip()) * scale
            except ValueError:
                continue
            if 0 <= value <= MAX_RETRY_AFTER_S:
                return value
    return None


# Some litellm providers report a refused connection as a 500 "InternalServerError".
_CONNECT_FAILED = re.compile(r"connection error|cannot connect to host|connect call failed|"
                             r"connection refused", re.IGNORECASE)


def failure_name(exc: BaseException) -> str:
    """What failed, for a log line: the exception's class, except that a refused or failed
    connection is called one (litellm reports some as a 500 ``InternalServerError``)."""
    return "connection failed" if _CONNECT_FAILED.search(str(exc)) else type(exc).__name__


def user_message(exc: BaseException, provider: str = "openai", api_base: str | None = None) -> str:
    ll = import_litellm()
    name = type(exc).__name__
    if isinstance(exc, ll.AuthenticationError):
        return f"the model provider refused the API key; check providers.{provider}.apiKey in the config"
    if isinstance(exc, ll.Timeout) or "timed out" in str(exc).lower():
        return "the model did not answer in time (agents.defaults.llmTimeoutS)"
    if isinstance(exc, ll.APIConnectionError) or _CONNECT_FAILED.search(str(exc)):
        where = f" at {api_base}" if api_base else ""
        return (f"could not reach the model provider{where}; check providers.{provider}.apiBase "
                "and your network")
    if isinstance(exc, ll.NotFoundError):
        return "the model was not found at the provider; check agents.defaults.model"
    if is_transient(exc):
        return "the model provider kept failing; please try again in a moment"
    return f"the model call failed ({name})"


_LITELLM_PREFIX = re.compile(r"^(litellm\.\w+:\s*)?(\w+Error:\s*)?(\w+Exception\s*-\s*)?")


# aiohttp and friends put Python reprs in their messages: "ssl:<ssl.SSLContext object at 0x7f…>".
_SSL_REPR = re.compile(r"\s*ssl:<[^<>]*object at 0x[0-9a-fA-F]+>")
_OBJECT_REPR = re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>")


def without_reprs(text: str) -> str:
    """Text fit for a person: object reprs with memory addresses removed."""
    return _OBJECT_REPR.sub(r"\1", _SSL_REPR.sub("", text))


def provider_detail(exc: BaseException, limit: int = 300) -> str:
    """The provider's own error text (from the HTTP body), without litellm's prefixes or
    Python object reprs, short."""
    text = without_reprs(str(getattr(exc, "message", None) or exc or type(exc).__name__))
    text = " ".join(_LITELLM_PREFIX.sub("", text.strip()).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
