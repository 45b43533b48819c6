"""The client side of the local API: find a running gateway and ask it (``lucid agent``).

Apart from ``gateway.daemon.local_api`` (the route, which needs FastAPI) so that a one-shot
``lucid agent -m`` checks for a running gateway without importing the web stack. Also the
gateway's side of the ``state/local.json`` file, which needs nothing more.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def ask_running(url: str, token: str, text: str, *, timeout_s: float,
                session: str | None = None) -> tuple[bool, str] | None:
    """Send ``text`` to the running gateway; None when it cannot be reached (fall back)."""
    import httpx

    try:
        response = httpx.post(f"{url}/v1/local/messages", json={"text": text, "session": session},
                              headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx.Timeout(timeout_s, connect=2.0))
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return None
    except httpx.HTTPError as exc:
        return False, f"the gateway did not answer ({type(exc).__name__})"
    if response.status_code == 401:
        return None  # a stale file from an earlier run: not our gateway
    try:
        data = response.json()
    except ValueError:
        return False, f"the gateway answered HTTP {response.status_code}"
    if response.status_code != 200:
        return False, str(data.get("detail", f"HTTP {response.status_code}"))
    return bool(data["ok"]), str(data["reply"])
