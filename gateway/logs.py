"""Logging for the daemon: human-readable or JSON lines, with secrets redacted everywhere.

The redaction (``config.redact``) is a filter on the root handler, not on our own loggers,
because the lines that leak secrets usually come from libraries. Every record that reaches
the handler is rendered once and scrubbed of the config's secret values and of token-shaped
strings, tracebacks included, so a formatter never sees the raw text.

In JSON mode each line of a turn also carries ``session``, ``channel`` and ``turn``
(``journalctl -o cat | jq 'select(.turn == "…")'``), and each turn ends with one INFO line
whose facts (model, tokens, tools, ms) are fields of their own: the agent loop binds them in a
context variable around each message (``turn_log_context``), and asyncio copies context
into the tasks a turn starts, so library lines logged inside the turn carry them too.
Health-check and metrics scrapes are left out of the access log: a scrape every 10 s
would bury the lines that matter.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any, Literal

from pydantic import BaseModel, SecretStr

from lucidgate.config.redact import RedactingFilter, Redactor

LogFormat = Literal["text", "json"]

_ENV_SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")


_TURN: ContextVar[dict[str, str] | None] = ContextVar("lucid_turn", default=None)


@contextmanager
def turn_log_context(session_key: str, channel: str) -> Iterator[str]:
    """Tag every log line inside with the session, channel and a fresh turn id."""
    turn = uuid.uuid4().hex[:12]
    token = _TURN.set({"session": session_key, "channel": channel, "turn": turn})
    try:
        yield turn
    finally:
        _TURN.reset(token)


# Paths whose requests the access log skips (probes and scrapes).
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class ProbeFilter(logging.Filter):
    """Drops uvicorn access lines for ``QUIET_PATHS`` (args: client, method, path, ...)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            return args[2].split("?", 1)[0] not in QUIET_PATHS
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for journald and Docker log drivers."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)  # logger.info(..., extra={"fields": {...}})
        if isinstance(fields, dict):
            entry.update({k: v for k, v in fields.items() if k not in entry})
        turn = _TURN.get()
        if turn is not None:
            entry.update(turn)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

# Libraries that are chatty at INFO; their warnings still show.
QUIET_LOGGERS = ("httpx", "httpcore", "LiteLLM", "litellm", "hpack", "apscheduler.scheduler", "git", "watchfiles",
          "aiohttp.access", "telegram.ext", "slack_bolt", "slack_sdk", "mcp", "nio", "discord")


def setup_logging(
    *, level: int = logging.INFO, fmt: LogFormat = "text", stream: IO[str] | None = None,
    secrets: Iterable[str] = (),
) -> Redactor:
    """Install one root handler with the redacting filter; returns the redactor to extend.

    Calling it again replaces the handler it installed before (tests, re-configuration).
    """
    redactor = Redactor(secrets)
    redactor.add(secrets_from_env(os.environ))
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name("lucid")
    handler.addFilter(RedactingFilter(redactor))
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "lucid"]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    # uvicorn loggers propagate to the root (we run it with log_config=None).
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
        logging.getLogger(name).disabled = False  # a library's dictConfig may have disabled it
        logging.getLogger(name).setLevel(logging.NOTSET)  # and uvicorn.Config(log_level=) set a level
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, ProbeFilter) for f in access.filters):
        access.addFilter(ProbeFilter())
    return redactor


def secrets_from_config(model: BaseModel) -> list[str]:
    """Every ``SecretStr`` value anywhere in the configuration (tokens, keys, secrets)."""
    found: list[str] = []

    def walk(node: object, name: str = "") -> None:
        if isinstance(node, SecretStr):
            found.append(node.get_secret_value())
        elif isinstance(node, BaseModel):
            for field in type(node).model_fields:
                walk(getattr(node, field, None), field)
            for key, value in (node.__pydantic_extra__ or {}).items():
                walk(value, key)
        elif isinstance(node, dict):
            for value in node.values():
                # Extra provider headers usually carry credentials (Authorization, api-key).
                if isinstance(value, str) and "header" in name:
                    found.append(value)
                else:
                    walk(value, name)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value, name)

    walk(model)
    return [s for s in found if s]


def secrets_from_env(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """Values of environment variables whose names say they hold a secret."""
    return [v for k, v in environ.items()
            if v and k.upper().endswith(_ENV_SECRET_SUFFIXES)]
