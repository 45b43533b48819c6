"""What a failed model call means: worth a retry, a context overflow, or the user's to fix.

litellm maps every provider's errors onto OpenAI-style exception classes; this module turns
them into the three decisions the LLM client makes (retry, recover from overflow, give up)
and into one short sentence the user can act on, naming the config key to check.
"""

from __future__ import annotations

import re

_TRANSIENT_NAMES = {
    "RateLimitError",
    "APIConnectionError",
    "Timeout",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
}


def is_transient(exc: BaseException) -> bool:
    if type(exc).__name__ in _TRANSIENT_NAMES:
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def is_overflow(exc: BaseException) -> bool:
    if type(exc).__name__ == "ContextWindowExceededError":
        return True
    text = str(exc).lower()
    return "context_length_exceeded" in text or "maximum context length" in text


# Some litellm providers report a refused connection as a 500 "InternalServerError".
_CONNECT_FAILED = re.compile(r"connection error|cannot connect to host|connect call failed|"
                             r"connection refused", re.IGNORECASE)


def user_message(exc: BaseException, provider: str = "openai", api_base: str | None = None) -> str:
    name = type(exc).__name__
    if name == "AuthenticationError":
        return f"the model provider refused the API key; check providers.{provider}.apiKey in the config"
    if name in ("Timeout",) or "timed out" in str(exc).lower():
        return "the model did not answer in time (agents.defaults.llmTimeoutS)"
    if name == "APIConnectionError" or _CONNECT_FAILED.search(str(exc)):
        where = f" at {api_base}" if api_base else ""
        return (f"could not reach the model provider{where}; check providers.{provider}.apiBase "
                "and your network")
    if name == "NotFoundError":
        return "the model was not found at the provider; check agents.defaults.model"
    if is_transient(exc):
        return "the model provider kept failing; please try again in a moment"
    return f"the model call failed ({name})"


_LITELLM_PREFIX = re.compile(r"^(litellm\.\w+:\s*)?(\w+Error:\s*)?(\w+Exception\s*-\s*)?")


def provider_detail(exc: BaseException, limit: int = 300) -> str:
    """The provider's own error text (from the HTTP body), without litellm's prefixes, short."""
    text = str(getattr(exc, "message", None) or exc or type(exc).__name__)
    text = " ".join(_LITELLM_PREFIX.sub("", text.strip()).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
