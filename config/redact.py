"""The one redaction filter: secrets never reach a log line, whoever logs it.

The lines that leak secrets usually come from libraries: an HTTP client logging a Telegram
URL (``/bot<token>/``), an SDK echoing an ``Authorization`` header or a Slack token, a
traceback quoting a config value. A ``RedactingFilter`` renders each record once, scrubs
known secret values and token-shaped strings (``Redactor``) from the message, the traceback
and the stack text, and hands it on with no arguments left to re-format.

The daemon puts one on its root handler (``gateway.logs``); a channel adds its own secrets
and puts a filter on the library loggers it drives, so the SDK's records are clean even
where they are handled before reaching the root. Lives in ``config`` (the lowest layer) so
every package can use it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

MASK = "***"
# Known secret values shorter than this are not redacted by value: masking every "abc" in
# every log line would destroy the logs and protect nothing.
MIN_SECRET_LEN = 6

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization headers and similar: keep the scheme, drop the credential.
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=\-]{6,}"), r"\1 " + MASK),
    # Telegram bot tokens, wherever they appear (URLs: /bot<token>/getUpdates).
    (re.compile(r"\b\d{5,}:[A-Za-z0-9_\-]{30,}"), MASK),
    # Slack tokens (the prefix stays: it says which kind of token leaked).
    (re.compile(r"\b(xox[a-z]|xapp)-[A-Za-z0-9\-]{4,}"), r"\1-" + MASK),
    # OpenAI-style and similar API keys.
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}"), MASK),
    # key=value / "key": "value" pairs whose key names a secret (placeholders like "sk-..."
    # in help texts are left alone).
    (re.compile(r"""(?i)((?:api[_-]?key|apikey|access[_-]?token|secret|password|passwd|signing[_-]?secret|"""
                r"""bot[_-]?token|app[_-]?token|callback[_-]?secret)["']?\s*[:=]\s*["']?)"""
                r"""(?![^\s"',&;}]*\.\.\.)([^\s"',&;}]{4,})"""),
     r"\1" + MASK),
)

class Redactor:
    """Replaces known secret values and token-shaped strings with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._by_value: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        fresh = {s for s in secrets if s and len(s) >= MIN_SECRET_LEN} - self._secrets
        if not fresh:
            return
        self._secrets |= fresh
        # Longest first so a secret that contains another is masked whole.
        ordered = sorted(self._secrets, key=len, reverse=True)
        self._by_value = re.compile("|".join(re.escape(s) for s in ordered))

    def redact(self, text: str) -> str:
        if self._by_value is not None:
            text = self._by_value.sub(MASK, text)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text


class RedactingFilter(logging.Filter):
    """Renders each record, redacts it, and freezes the result into ``record.msg``."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not lose the line
            message = f"{record.msg!r} {record.args!r}"
        record.msg = self.redactor.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact(record.stack_info)
        return True

    def redact(self, text: str) -> str:
        """Scrub a string that is not a log record (an error text shown to the user)."""
        return self.redactor.redact(text)

    def install(self, targets: Iterable[logging.Filterer]) -> None:
        """Add this filter to each target (loggers or handlers) that does not have it yet.

        A filter on a logger sees only records logged on that very logger, not its
        children's, so a channel names the exact loggers (``logger_family``)."""
        for target in targets:
            if self not in target.filters:
                target.addFilter(self)

    def uninstall(self, targets: Iterable[logging.Filterer]) -> None:
        for target in targets:
            target.removeFilter(self)


def logger_family(*roots: str) -> list[logging.Logger]:
    """The named loggers and every logger created so far beneath them."""
    names = [n for n in list(logging.Logger.manager.loggerDict)
             if any(n == root or n.startswith(f"{root}.") for root in roots)]
    return [logging.getLogger(n) for n in {*roots, *names}]
