"""dingtalk-stream plumbing: the logger handed to the SDK, and secrets kept out of logs.

The SDK logs through the logger it is given (its handlers make their own, under
``dingtalk_stream``). Two of its records are routine and dropped: the router's "unknown message
topic" warning for every keepalive ``ping`` system frame (which it does answer), and "open
connection, url=…" at every attempt (the supervisor logs an outage once, when it starts and ends).
The app secret, the access token and session webhook URLs (which carry a session token) are
masked on every logger that might print them.
"""

from __future__ import annotations

import logging

from lucidgate.config.redact import RedactingFilter, Redactor, logger_family

sdk_logger = logging.getLogger("lucidgate.channels.dingtalk.sdk")  # handed to the SDK's client


class _Routine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("unknown message topic, topic=ping,")
                    or message.startswith("open connection, url="))


_QUIET = _Routine()


def quiet_routine() -> None:
    if _QUIET not in sdk_logger.filters:
        sdk_logger.addFilter(_QUIET)


def redactor(*secrets: str) -> RedactingFilter:
    return RedactingFilter(Redactor([s for s in secrets if s]))


def log_targets() -> list[logging.Filterer]:
    """Where a secret could show up: the root handlers, ours, the SDK's, httpx's, websockets'."""
    return [*logging.getLogger().handlers,
            *logger_family("lucidgate.channels.dingtalk", "dingtalk_stream", "httpx", "websockets")]
