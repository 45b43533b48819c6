"""The client side of the local API: find a running gateway and ask it (``lucid agent``).

Apart from ``gateway.daemon.local_api`` (the route, which needs FastAPI) so that a one-shot
``lucid agent -m`` checks for a running gateway without importing the web stack. Also the
gateway's side of the ``state/local.json`` file, which needs nothing more.
"""

from __future__ import annotations

import json
import os
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from urllib.parse import urlsplit

from config.fileio import atomic_write_text

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
    except (OSError, HTTPException, ValueError):
        return False
    return status == 200


def ask_running(url: str, token: str, text: str, *, timeout_s: float,
                session: str | None = None) -> tuple[bool, str] | None:
    """Send ``text`` to the running gateway; None when it cannot be reached (fall back)."""
    body = json.dumps({"text": text, "session": session}).encode("utf-8")
    try:
        status, raw = _loopback("POST", f"{url}/v1/local/messages", body=body, token=token,
                                connect_s=2.0, read_s=timeout_s)
    except _Unreachable:
        return None
    except (OSError, HTTPException, ValueError) as exc:
        return False, f"the gateway did not answer ({type(exc).__name__})"
    if status == 401:
        return None  # a stale file from an earlier run: not our gateway
    try:
        data = json.loads(raw)
    except ValueError:
        return False, f"the gateway answered HTTP {status}"
    if status != 200:
        return False, str(data.get("detail", f"HTTP {status}"))
    return bool(data["ok"]), str(data["reply"])


class _Unreachable(OSError):
    """The connection itself failed: no gateway listens there (any more)."""


def _loopback(method: str, url: str, *, connect_s: float, read_s: float, body: bytes | None = None,
              token: str | None = None) -> tuple[int, bytes]:
    """One plain-HTTP request to the local API with the standard library: a terminal command
    that only talks to loopback needs neither httpx's import nor its SSL context (~0.3 s)."""
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
    finally:
        conn.close()
