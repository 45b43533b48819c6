"""Slack SDK plumbing shared by the Slack modules: token redaction and failure classes.

slack-sdk and Bolt log request details and error bodies; ``xoxb-``/``xapp-`` tokens are
masked by shape on every logger that may carry one. ``classify`` tells the channel's
``OutboundLimiter`` (``channels._ratelimit``) how to treat a failed Web API call.
"""

from __future__ import annotations

import logging

import aiohttp
from slack_sdk.errors import SlackApiError

from lucidgate.channels._ratelimit import Verdict
from lucidgate.config.redact import RedactingFilter, Redactor

sdk_logger = logging.getLogger("lucidgate.channels.slack.sdk")  # handed to Bolt and slack-sdk

# ----------------------------------------------------------------------------- redaction

# The shared patterns catch Slack tokens by shape (``xoxb-***``): no per-channel secrets, so
# one filter serves every logger and every SlackChannel.
_REDACTOR = RedactingFilter(Redactor())


def redact(text: str) -> str:
    return _REDACTOR.redact(text)


# A filter on a logger sees only records logged on that very logger, so it goes on each.
_REDACTED_LOGGERS = (
    "lucidgate.channels.slack", "lucidgate.channels.slack.channel", "lucidgate.channels.slack.events",
    "lucidgate.channels.slack.files", sdk_logger.name, "lucidgate.channels.slack.socket", "slack_sdk", "slack_bolt",
    "slack_sdk.web.async_base_client", "slack_sdk.web.async_slack_response",
    "slack_sdk.socket_mode.aiohttp", "slack_bolt.AsyncApp",
)


def install_redaction() -> None:
    _REDACTOR.install(logging.getLogger(name) for name in _REDACTED_LOGGERS)


# ----------------------------------------------------------------------------- outbound errors


def classify(exc: BaseException) -> Verdict:
    """How the limiter treats a failed Web API call (see ``channels._ratelimit``)."""
    if isinstance(exc, SlackApiError):
        status = getattr(exc.response, "status_code", 200)
        if status == 429:
            headers = getattr(exc.response, "headers", {}) or {}
            retry_after = next((v for k, v in headers.items() if k.lower() == "retry-after"), "1")
            try:
                return Verdict.wait(float(retry_after[0] if isinstance(retry_after, list) else retry_after))
            except (TypeError, ValueError):
                return Verdict.wait(1.0)
        return Verdict.retry() if status in (502, 503, 504) else Verdict.fail()
    # Nothing reached Slack: safe to try again.
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return Verdict.retry()
    # The request may have been processed: resending could post twice.
    if isinstance(exc, TimeoutError | aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return Verdict.uncertain()
    return Verdict.fail()
