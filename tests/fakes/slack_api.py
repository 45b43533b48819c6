"""A fake Slack Web API + Socket Mode server on 127.0.0.1, for the real slack-sdk/Bolt.

The adapter's ``AsyncWebClient`` gets ``base_url=fake.base_url`` and talks to this server
exactly as it would to slack.com: bearer tokens, JSON or form bodies, ``{"ok": ...}``
envelopes, 429 with ``Retry-After``. ``apps.connections.open`` hands out a ``ws://`` URL
served here too, so Socket Mode runs its real websocket client against us.

    async with FakeSlackAPI() as slack:
        env_id = await slack.send_envelope(event_callback(...))
        await slack.wait_until(lambda: env_id in slack.acked)
        slack.fail_next("chat.postMessage", status=429, retry_after=1)

Every Web API call is recorded in ``calls``; every websocket frame from the client in
``ws_frames``; file downloads in ``downloads``. Uploads follow ``files_upload_v2``'s three
steps (``files.getUploadURLExternal``, a POST of the bytes to the URL it handed out,
``files.completeUploadExternal``); completed files land in ``shared`` with their bytes.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

__all__ = ["ApiCall", "FakeSlackAPI", "Scripted", "event_callback"]


@dataclass(frozen=True, slots=True)
class ApiCall:
    method: str
    params: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class Scripted:
    """A one-off answer to the next call of a method (errors, delays)."""

    status: int = 200
    body: dict[str, Any] | None = None
    retry_after: int | None = None
    delay: float = 0.0


def event_callback(event: dict[str, Any], *, event_id: str | None = None, team: str = "T1") -> dict:
    """The Events API envelope Slack wraps every event in."""
    return {
        "token": "legacy-verification-token",
        "team_id": team,
        "api_app_id": "A1",
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": team, "user_id": "UBOT", "is_bot": True}],
    }


class FakeSlackAPI:
    def __init__(
        self,
        *,
        bot_token: str = "xoxb-test-bot-token",
        app_token: str = "xapp-test-app-token",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        port: int = 0,
    ) -> None:
        self.port = port  # 0: any free port (a restarted fake can reuse the old one)
        self.bot_token = bot_token
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.root = ""
        self.calls: list[ApiCall] = []
        self.downloads: list[tuple[str, str | None]] = []
        self.ws_frames: list[dict[str, Any]] = []
        self.ws_connections = 0
        # A silent server accepts websockets but never says hello or answers pings
        # (a half-dead connection the adapter's watchdog must notice).
        self.silent = False
        self._files: dict[str, tuple[bytes, str]] = {}
        self._uploads: dict[str, tuple[str, bytes | None]] = {}  # file id -> (name, bytes once posted)
        self.shared: list[dict[str, Any]] = []  # {"channel", "thread_ts", "name", "data"} per completed file
        self._script: dict[str, collections.deque[Scripted]] = collections.defaultdict(collections.deque)
        self._sockets: list[web.WebSocketResponse] = []
        self._ts = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None

    # ----------------------------------------------------------------- views
    @property
    def base_url(self) -> str:
        return f"{self.root}/api/"

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    @property
    def acked(self) -> list[str]:
        return [f["envelope_id"] for f in self.ws_frames if "envelope_id" in f]

    # ----------------------------------------------------------------- scripting
    def fail_next(self, method: str, *, status: int = 429, error: str = "ratelimited",
                  retry_after: int | None = 1) -> None:
        self._script[method].append(
            Scripted(status=status, body={"ok": False, "error": error}, retry_after=retry_after)
        )

    def delay_next(self, method: str, seconds: float) -> None:
        self._script[method].append(Scripted(delay=seconds))

    def add_file(self, file_id: str, name: str, data: bytes, *, mimetype: str = "text/plain",
                 size: int | None = None) -> dict[str, Any]:
        """Serve ``data`` and return the file object an event's ``files`` list carries."""
        path = f"/files-pri/T1-{file_id}/download/{name}"
        self._files[path] = (data, mimetype)
        return {
            "id": file_id,
            "name": name,
            "mimetype": mimetype,
            "size": len(data) if size is None else size,
            "url_private": f"{self.root}{path}",
            "url_private_download": f"{self.root}{path}",
        }

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        """Wait until ``predicate()`` holds; re-checked after every call or frame."""
        assert self._changed is not None, "FakeSlackAPI is not started"
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # ----------------------------------------------------------------- socket mode
    async def send_envelope(self, payload: dict[str, Any], *, type: str = "events_api",
                            retry_attempt: int = 0) -> str:
        """Push an envelope on the newest open websocket; returns its envelope_id."""
        await self.wait_until(lambda: any(not ws.closed for ws in self._sockets))
        ws = [ws for ws in self._sockets if not ws.closed][-1]
        envelope_id = str(uuid.uuid4())
        await ws.send_str(json.dumps({
            "envelope_id": envelope_id,
            "type": type,
            "payload": payload,
            "accepts_response_payload": type != "events_api",
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }))
        return envelope_id

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=not self.silent, timeout=1.0)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.ws_connections += 1
        await self._notify()
        if not self.silent:
            await ws.send_str(json.dumps({"type": "hello", "num_connections": 1,
                                          "connection_info": {"app_id": "A1"}}))
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                try:
                    self.ws_frames.append(json.loads(msg.data))
                except ValueError:
                    self.ws_frames.append({"raw": msg.data})
                await self._notify()
        return ws

    # ----------------------------------------------------------------- web api
    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                params.update(await request.json())
            else:
                params.update(await request.post())
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else params.get("token")
        self.calls.append(ApiCall(method, params, token))
        await self._notify()

        script = self._script[method]
        scripted = script.popleft() if script else None
        if scripted is not None and scripted.delay:
            await asyncio.sleep(scripted.delay)
        if scripted is not None and scripted.body is not None:
            headers = {"Retry-After": str(scripted.retry_after)} if scripted.retry_after else {}
            return web.json_response(scripted.body, status=scripted.status, headers=headers)

        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return web.json_response(self._answer(method, params))

    def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {"ok": True, "url": "https://fake.slack.com/", "team": "Fake", "user": "lucid",
                    "team_id": "T1", "user_id": self.bot_user_id, "bot_id": self.bot_id,
                    "is_enterprise_install": False}
        if method == "apps.connections.open":
            ws_root = self.root.replace("http://", "ws://", 1)
            return {"ok": True, "url": f"{ws_root}/link/?ticket={uuid.uuid4()}&app_id=A1"}
        if method == "chat.postMessage":
            if not params.get("channel"):
                return {"ok": False, "error": "channel_not_found"}
            if not params.get("text") and not params.get("blocks"):
                return {"ok": False, "error": "no_text"}
            ts = f"{1_700_000_000 + next(self._ts)}.000100"
            return {"ok": True, "channel": params["channel"], "ts": ts,
                    "message": {"text": params.get("text"), "ts": ts}}
        if method == "chat.update":
            if not params.get("channel") or not params.get("ts"):
                return {"ok": False, "error": "message_not_found"}
            return {"ok": True, "channel": params["channel"], "ts": params["ts"], "text": params.get("text")}
        if method in ("reactions.add", "reactions.remove"):
            return {"ok": True}
        if method == "files.getUploadURLExternal":
            if not params.get("filename") or not str(params.get("length", "")).isdigit():
                return {"ok": False, "error": "invalid_arguments"}
            file_id = f"F{next(self._ts)}"
            self._uploads[file_id] = (str(params["filename"]), None)
            return {"ok": True, "file_id": file_id, "upload_url": f"{self.root}/upload/{file_id}"}
        if method == "files.completeUploadExternal":
            listed = json.loads(params.get("files") or "[]")
            if not params.get("channel_id") or not listed:
                return {"ok": False, "error": "invalid_arguments"}
            done = []
            for entry in listed:
                name, data = self._uploads.get(entry["id"], ("", None))
                if data is None:
                    return {"ok": False, "error": "file_not_found"}
                self.shared.append({"channel": params["channel_id"], "thread_ts": params.get("thread_ts"),
                                    "name": name, "data": data})
                done.append({"id": entry["id"], "name": name, "title": entry.get("title")})
            return {"ok": True, "files": done}
        return {"ok": False, "error": "unknown_method"}

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        if file_id not in self._uploads:
            return web.Response(status=404, text="unknown upload")
        self._uploads[file_id] = (self._uploads[file_id][0], await request.read())
        await self._notify()
        return web.Response(text="OK - 200")

    async def _file(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        self.downloads.append((request.path, auth))
        await self._notify()
        found = self._files.get(request.path)
        if auth != f"Bearer {self.bot_token}":
            return web.Response(status=403, text="forbidden")
        if found is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=found[0], content_type=found[1])

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> FakeSlackAPI:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/files-pri/{rest:.*}", self._file)
        app.router.add_post("/upload/{file_id}", self._upload)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self.port))
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._runner = runner
        self._changed = asyncio.Condition()
        self.port = sock.getsockname()[1]
        self.root = f"http://127.0.0.1:{self.port}"
        return self

    async def drop_sockets(self) -> None:
        """Close every websocket from the server side (a Slack-side disconnect)."""
        for ws in self._sockets:
            await ws.close()

    async def stop(self) -> None:
        for ws in self._sockets:
            if not ws.closed:
                await ws.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeSlackAPI:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
