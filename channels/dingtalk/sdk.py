"""dingtalk-stream plumbing: the logger handed to the SDK, and secrets kept out of logs.

The SDK logs through the logger it is given (its handlers make their own, under
``dingtalk_stream``). Its router warns "unknown message topic" for every keepalive ``ping``
system frame DingTalk sends — a routine frame it does answer — so that one record is dropped.
The app secret, the access token and session webhook URLs (which carry a session token) are
masked on every logger that might print them.
"""

from __future__ import annotations

import logging

from lucidgate.config.redact import RedactingFilter, Redactor, logger_family

sdk_logger = logging.getLogger("lucidgate.channels.dingtalk.sdk")  # handed to the SDK's client


class _QuietPings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("unknown message topic, topic=ping,")


_QUIET = _QuietPings()


def quiet_pings() -> None:
    if _QUIET not in sdk_logger.filters:
        sdk_logger.addFilter(_QUIET)


def redactor(*secrets: str) -> RedactingFilter:
    return RedactingFilter(Redactor([s for s in secrets if s]))


def log_targets() -> list[logging.Filterer]:
    """Where a secret could show up: the root handlers, ours, the SDK's, httpx's, websockets'."""
    return [*logging.getLogger().handlers,
            *logger_family("lucidgate.channels.dingtalk", "dingtalk_stream", "httpx", "websockets")]
