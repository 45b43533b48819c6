"""A real Matrix homeserver for the tests: Synapse from its own venv, on loopback, SQLite.

``.ci/run`` installs ``matrix-synapse`` into ``.venv-synapse`` (apart from the project's
venv, so its pins never meet ``requirements.lock``). The session-scoped ``homeserver``
fixture writes a closed configuration — client API only on 127.0.0.1, no federation
listener, no key servers, no stats, no URL previews, registration only by shared secret,
rate limits raised for tests — starts it once for every Matrix test and stops it at the
end. Without the venv the Matrix tests skip with one line, or fail when
``LUCID_REQUIRE_REAL=1`` (CI sets it: there a missing homeserver is a broken install).

``Person`` is the human side of a test: plain HTTP calls to the client API (create a room,
invite, send, read the room), independent of the library the channel under test uses.
``OutageProxy`` sits between a gateway and the homeserver and can fail its sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import hmac
import itertools
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_SECRET = "lucid-test-registration-secret"
SERVER_NAME = "lucid.test"
_names = itertools.count(1)


def synapse_python() -> Path | None:
    path = Path(os.environ.get("LUCID_SYNAPSE_VENV", ROOT / ".venv-synapse")) / "bin" / "python"
    return path if path.exists() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(folder: Path, port: int) -> str:
    fast = "{per_second: 10000, burst_count: 10000}"
    return f"""
server_name: "{SERVER_NAME}"
public_baseurl: "http://127.0.0.1:{port}/"
pid_file: "{folder}/homeserver.pid"
listeners:
  - {{port: {port}, bind_addresses: ["127.0.0.1"], type: http, tls: false, x_forwarded: false,
      resources: [{{names: [client], compress: false}}]}}
database: {{name: sqlite3, args: {{database: "{folder}/homeserver.db"}}}}
log_config: "{folder}/log.yaml"
media_store_path: "{folder}/media"
signing_key_path: "{folder}/signing.key"
registration_shared_secret: "{SHARED_SECRET}"
enable_registration: false
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence: {{enabled: false}}
url_preview_enabled: false
enable_metrics: false
enable_media_repo: true
rc_message: {fast}
rc_registration: {fast}
rc_login: {{address: {fast}, account: {fast}, failed_attempts: {fast}}}
rc_joins: {{local: {fast}, remote: {fast}}}
rc_joins_per_room: {fast}
rc_invites: {{per_room: {fast}, per_user: {fast}, per_issuer: {fast}}}
rc_media_create: {fast}
"""


_LOG = """
version: 1
formatters: {{precise: {{format: '%(asctime)s %(name)s %(levelname)s %(message)s'}}}}
handlers: {{file: {{class: logging.FileHandler, formatter: precise, filename: "{log}"}}}}
root: {{level: WARNING, handlers: [file]}}
disable_existing_loggers: false
"""


def _die_with_parent() -> None:
    """Linux: the homeserver gets SIGTERM when the test process dies, even by ``os._exit``
    (a pytest-timeout), so no Synapse outlives its test run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Homeserver:
    """One Synapse process; ``url`` is its client API on loopback."""

    def __init__(self, python: Path, folder: Path) -> None:
        self.python, self.folder = python, folder
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> Homeserver:
        cfg = self.folder / "homeserver.yaml"
        cfg.write_text(_config(self.folder, self.port))
        (self.folder / "log.yaml").write_text(_LOG.format(log=self.folder / "homeserver.log"))
        base = [str(self.python), "-m", "synapse.app.homeserver", "-c", str(cfg)]
        env = {**os.environ, "SYNAPSE_CACHE_FACTOR": "0.5"}
        subprocess.run([*base, "--generate-keys"], check=True, capture_output=True, env=env, timeout=120)
        out = (self.folder / "stdout.log").open("wb")
        self.proc = subprocess.Popen(base, stdout=out, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"synapse exited: {(self.folder / 'stdout.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("synapse did not come up in time")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    async def register(self, localpart: str | None = None, password: str = "pw-not-a-secret") -> Person:
        """A new account by the shared-secret admin API (no open registration exists)."""
        name = localpart or f"user{next(_names)}_{uuid.uuid4().hex[:6]}"
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as http:
            nonce = (await http.get("/_synapse/admin/v1/register")).json()["nonce"]
            mac = hmac.new(SHARED_SECRET.encode(), b"\x00".join(
                [nonce.encode(), name.encode(), password.encode(), b"notadmin"]), hashlib.sha1).hexdigest()
            response = await http.post("/_synapse/admin/v1/register", json={
                "nonce": nonce, "username": name, "password": password, "admin": False, "mac": mac})
            response.raise_for_status()
            data = response.json()
        return Person(self.url, data["user_id"], data["access_token"], password)


@dataclass
class Person:
    """Someone using Matrix, through plain client-API calls."""

    url: str
    user_id: str
    token: str
    password: str

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None,
                   **params: Any) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.url, timeout=30,
                                     headers={"Authorization": f"Bearer {self.token}"}) as http:
            response = await http.request(method, f"/_matrix/client/v3{path}", json=body, params=params or None)
        response.raise_for_status()
        return dict(response.json())

    async def create_room(self, invite: list[str], *, direct: bool = True, encrypted: bool = False) -> str:
        body: dict[str, Any] = {"invite": invite, "is_direct": direct,
                                "preset": "trusted_private_chat" if direct else "private_chat"}
        if encrypted:
            body["initial_state"] = [{"type": "m.room.encryption", "state_key": "",
                                      "content": {"algorithm": "m.megolm.v1.aes-sha2"}}]
        return str((await self.call("POST", "/createRoom", body))["room_id"])

    async def join(self, room: str) -> None:
        await self.call("POST", f"/join/{quote(room)}", {})

    async def invite(self, room: str, user: str) -> None:
        await self.call("POST", f"/rooms/{quote(room)}/invite", {"user_id": user})

    async def send(self, room: str, body: str, *, mention: str | None = None, **extra: Any) -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": body, **extra}
        if mention:
            content["m.mentions"] = {"user_ids": [mention]}
        path = f"/rooms/{quote(room)}/send/m.room.message/{uuid.uuid4().hex}"
        return str((await self.call("PUT", path, content))["event_id"])

    async def upload(self, data: bytes, name: str, mime: str) -> str:
        async with httpx.AsyncClient(base_url=self.url, timeout=30,
                                     headers={"Authorization": f"Bearer {self.token}"}) as http:
            response = await http.post("/_matrix/media/v3/upload", content=data, params={"filename": name},
                                       headers={"Content-Type": mime})
        response.raise_for_status()
        return str(response.json()["content_uri"])

    async def download(self, mxc: str) -> bytes:
        server, media = mxc.removeprefix("mxc://").split("/", 1)
        async with httpx.AsyncClient(base_url=self.url, timeout=30,
                                     headers={"Authorization": f"Bearer {self.token}"}) as http:
            response = await http.get(f"/_matrix/client/v1/media/download/{server}/{media}")
        response.raise_for_status()
        return response.content

    async def events(self, room: str) -> list[dict[str, Any]]:
        """The room's timeline, oldest first."""
        data = await self.call("GET", f"/rooms/{quote(room)}/messages", dir="b", limit=200)
        return list(reversed(data["chunk"]))

    async def messages_from(self, room: str, sender: str) -> list[dict[str, Any]]:
        return [e for e in await self.events(room) if e["type"] == "m.room.message" and e["sender"] == sender]

    async def members(self, room: str) -> dict[str, str]:
        """user id -> membership (join, invite, leave)."""
        data = await self.call("GET", f"/rooms/{quote(room)}/members")
        return {e["state_key"]: e["content"]["membership"] for e in data["chunk"]}

    async def watch_typing(self, room: str, user: str, seen: list[bool]) -> None:
        """Long-poll ``/sync`` for the room's typing notifications; append each change of
        ``user``'s state (True: typing) to ``seen``. Runs until cancelled."""
        flt = json.dumps({"room": {"rooms": [room], "timeline": {"limit": 0}, "state": {"types": []},
                                   "ephemeral": {"types": ["m.typing"]}},
                          "presence": {"types": []}, "account_data": {"types": []}})
        since: str | None = None
        while True:
            params: dict[str, Any] = {"filter": flt, "timeout": 0 if since is None else 5000}
            if since:
                params["since"] = since
            data = await self.call("GET", "/sync", **params)
            since = data["next_batch"]
            joined = data.get("rooms", {}).get("join", {}).get(room, {})
            for event in joined.get("ephemeral", {}).get("events", []):
                typing = user in event.get("content", {}).get("user_ids", [])
                if not seen or seen[-1] != typing:
                    seen.append(typing)

    async def wait(self, check: Any, timeout: float = 60.0, what: str = "condition") -> Any:
        """Poll the async ``check()`` until it returns something truthy (the deadline bounds a failure)."""
        deadline = time.monotonic() + timeout
        while True:
            result = await check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not reached within {timeout:g} s")
            await asyncio.sleep(0.05)


def require_synapse() -> Path:
    """Synapse's python, or a one-line skip — a failure when ``LUCID_REQUIRE_REAL=1``."""
    python = synapse_python()
    if python is None:
        reason = "matrix-synapse is not installed in .venv-synapse (.ci/run installs it)"
        if os.environ.get("LUCID_REQUIRE_REAL") == "1":
            pytest.fail(f"LUCID_REQUIRE_REAL=1 but {reason}")
        pytest.skip(reason)
    return python


@pytest.fixture(scope="session")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    server = Homeserver(require_synapse(), tmp_path_factory.mktemp("synapse")).start()
    try:
        yield server
    finally:
        server.stop()


class OutageProxy:
    """A loopback reverse proxy to the homeserver whose message sends can be made to fail.

    ``outage`` is None (pass everything), ``"500"`` (every ``PUT …/send/…`` answers 500) or
    ``"429"`` (they answer ``M_LIMIT_EXCEEDED`` with ``retry_after_ms``). Everything else —
    sync, joins, media — passes, so the gateway keeps receiving while its replies fail.
    ``sends`` counts the send attempts that reached the proxy.
    """

    def __init__(self, upstream: str, *, retry_after_ms: int = 200) -> None:
        self.upstream = upstream
        self.retry_after_ms = retry_after_ms
        self.outage: str | None = None
        self.sends = 0
        self.failed = 0
        self.url = ""
        self._runner: Any = None
        self._session: Any = None

    async def __aenter__(self) -> OutageProxy:
        from aiohttp import ClientSession, ClientTimeout, web

        self._session = ClientSession(timeout=ClientTimeout(total=None), auto_decompress=False)
        app = web.Application(client_max_size=50 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
        await self._session.close()

    async def _forward(self, request: Any) -> Any:
        from aiohttp import web

        if request.method == "PUT" and "/send/" in request.path:
            self.sends += 1
            if self.outage == "500":
                self.failed += 1
                return web.json_response({"errcode": "M_UNKNOWN", "error": "outage"}, status=500)
            if self.outage == "429":
                self.failed += 1
                return web.json_response({"errcode": "M_LIMIT_EXCEEDED", "error": "slow down",
                                          "retry_after_ms": self.retry_after_ms}, status=429)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=body,
                                         headers=headers) as upstream:
            data = await upstream.read()
            out = {k: v for k, v in upstream.headers.items()
                   if k.lower() not in ("content-length", "transfer-encoding", "connection")}
            return web.Response(status=upstream.status, body=data, headers=out)
