"""The client side of the local API: find a running gateway and ask it (``lucid agent``,
``lucid memory search``).

Apart from ``gateway.daemon.local_api`` (the routes, which need FastAPI) so that a one-shot
``lucid agent -m`` or a search checks for a running gateway with the standard library alone
(no web stack, no numpy). Also the gateway's side of the ``state/local.json`` file, which
needs nothing more.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lucidgate.config.fileio import atomic_write_text

LOCAL_FILE = Path("state") / "local.json"
SESSION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def publish(workspace: Path, url: str, token: str) -> Path:
    """Write ``state/local.json`` (0600) once the gateway listens."""
    path = workspace / LOCAL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"url": url, "token": token, "pid": os.getpid()}))
    os.chmod(path, 0o600)
    return path


def withdraw(workspace: Path) -> None:
    (workspace / LOCAL_FILE).unlink(missing_ok=True)


def find_running(workspace: Path) -> tuple[str, str] | None:
    """(url, token) of a gateway running on ``workspace``, if its file names a live process."""
    try:
        data = json.loads((workspace / LOCAL_FILE).read_text(encoding="utf-8"))
        os.kill(int(data["pid"]), 0)
        return str(data["url"]), str(data["token"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def healthy(url: str, *, timeout_s: float = 1.5) -> bool:
    """Whether the gateway at ``url`` answers its health check."""
    try:
        status, _ = _loopback("GET", f"{url}/healthz", connect_s=timeout_s, read_s=timeout_s)
    except (OSError, BadAnswer, ValueError):
        return False
    return status == 200


def ask_running(url: str, token: str, text: str, *, timeout_s: float,
                session: str | None = None, agent: str | None = None) -> tuple[bool, str] | None:
    """Send ``text`` to the running gateway (for ``agent``, when given); None when it cannot
    be reached (fall back)."""
    fields: dict[str, Any] = {"text": text, "session": session}
    if agent is not None:  # only when asked: an older gateway refuses fields it does not know
        fields["agent"] = agent
    body = json.dumps(fields).encode("utf-8")
    try:
        status, raw = _loopback("POST", f"{url}/v1/local/messages", body=body, token=token,
                                connect_s=2.0, read_s=timeout_s)
    except _Unreachable:
        return None
    except (OSError, BadAnswer, ValueError) as exc:
        return False, f"the gateway did not answer ({type(exc.__cause__ or exc).__name__})"
    if status == 401:
        return None  # a stale file from an earlier run: not our gateway
    try:
        data = json.loads(raw)
    except ValueError:
        return False, f"the gateway answered HTTP {status}"
    if status != 200:
        return False, str(data.get("detail", f"HTTP {status}"))
    return bool(data["ok"]), str(data["reply"])


def agents_running(url: str, token: str, *, timeout_s: float = 3.0) -> list[dict[str, Any]] | None:
    """The running gateway's agents (``GET /v1/local/agents``: id, default, workspace, model,
    alive, active_turns, queued), or None when it does not answer or is too old to say."""
    try:
        status, raw = _loopback("GET", f"{url}/v1/local/agents", token=token, connect_s=timeout_s, read_s=timeout_s)
        data = json.loads(raw)
    except (OSError, BadAnswer, ValueError):
        return None
    agents = data.get("agents") if status == 200 and isinstance(data, dict) else None
    if not isinstance(agents, list) or not all(isinstance(a, dict) and "id" in a for a in agents):
        return None
    return agents


class LocalRefused(Exception):
    """The gateway answered and said no for a reason that searching in-process would not fix
    (search disabled, a bad query): ``detail`` is its message, for the user."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def search_running(url: str, token: str, query: str, *, limit: int, sources: list[str] | None = None,
                   timeout_s: float = 60.0) -> list[dict[str, Any]] | None:
    """The running gateway's hits for ``query`` (``Hit.to_wire()`` dicts, best first), or None
    when it cannot be reached, refuses the token or answers oddly: the caller searches itself.
    Raises ``LocalRefused`` on a 409 (disabled) or 422 (bad query)."""
    body = json.dumps({"query": query, "limit": limit, "sources": sources}).encode("utf-8")
    try:
        status, raw = _loopback("POST", f"{url}/v1/local/search", body=body, token=token,
                                connect_s=2.0, read_s=timeout_s)
        data = json.loads(raw)
    except (OSError, BadAnswer, ValueError):
        return None
    if status in (409, 422):
        raise LocalRefused(status, _detail(data, status))
    hits = data.get("hits") if status == 200 and isinstance(data, dict) else None
    if not isinstance(hits, list) or not all(isinstance(h, dict) for h in hits):
        return None
    return hits


def _detail(data: Any, status: int) -> str:
    """FastAPI's ``detail``: a string, or a validation error list made into one line."""
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, list):
        parts = []
        for err in detail:
            if isinstance(err, dict):
                where = ".".join(str(p) for p in err.get("loc", ())[1:])
                msg = str(err.get("msg", "")).removeprefix("Value error, ")
                parts.append(f"{where}: {msg}" if where else msg)
        return "; ".join(parts) or f"HTTP {status}"
    return str(detail) if detail else f"HTTP {status}"


class _Unreachable(OSError):
    """The connection itself failed: no gateway listens there (any more)."""


class BadAnswer(Exception):
    """The gateway's answer was not valid HTTP (it died mid-answer, or something else listens)."""


def _loopback(method: str, url: str, *, connect_s: float, read_s: float, body: bytes | None = None,
              token: str | None = None) -> tuple[int, bytes]:
    """One plain-HTTP request to the local API with the standard library: a terminal command
    that only talks to loopback needs neither httpx's import nor its SSL context (~0.3 s).
    ``http.client`` (which loads ``ssl``, ~20 ms) is imported here, not at the top, since
    most commands only look for a running gateway and find none."""
    from http.client import HTTPConnection, HTTPException

    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not a local http URL: {url}")
    conn = HTTPConnection(parts.hostname, parts.port or 80, timeout=connect_s)
    try:
        try:
            conn.connect()
        except OSError as exc:
            raise _Unreachable(str(exc)) from exc
        if conn.sock is not None:
            conn.sock.settimeout(read_s)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, parts.path or "/", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except HTTPException as exc:
        raise BadAnswer(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
