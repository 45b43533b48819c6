"""A logging filter that keeps a channel's credentials out of log records.

SDKs log request URLs and error bodies, and a bot token is often in them (Telegram puts it
in every Bot API path). A ``TokenRedactor`` rewrites a record's message, formatted traceback
and stack text before any handler sees it: known secret strings become ``<redacted>``, and
optional regex patterns catch tokens by shape (Slack's ``xoxb-…``) with their own replacement.

A filter on a logger only sees records logged on that very logger, not its children's, so
``install`` takes the exact targets; ``logger_family`` lists a library's loggers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

Replacement = str | Callable[[re.Match[str]], str]

REDACTED = "<redacted>"


class TokenRedactor(logging.Filter):
    """Replaces the given secrets (and matches of the given patterns) in every record it filters."""

    def __init__(self, *secrets: str, patterns: Iterable[tuple[re.Pattern[str], Replacement]] = ()) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s]
        self._patterns = list(patterns)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for pattern, replacement in self._patterns:
            text = pattern.sub(replacement, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's problem, not ours
            return True
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True

    def install(self, targets: Iterable[logging.Filterer]) -> None:
        """Add this filter to each target (loggers or handlers) that does not have it yet."""
        for target in targets:
            if self not in target.filters:
                target.addFilter(self)

    def uninstall(self, targets: Iterable[logging.Filterer]) -> None:
        for target in targets:
            target.removeFilter(self)


def logger_family(*roots: str) -> list[logging.Logger]:
    """The named loggers and every logger created so far beneath them."""
    names = [
        n for n in list(logging.Logger.manager.loggerDict)
        if any(n == root or n.startswith(f"{root}.") for root in roots)
    ]
    return [logging.getLogger(n) for n in {*roots, *names}]
