"""A Discord stand-in on loopback (REST API + Gateway), for the real discord.py to talk to.

The channel under test points discord.py's REST root at ``base_url`` (``/api``; the adapter
adds ``/v10``); ``GET /gateway/bot`` hands out the stand-in's own ``ws://127.0.0.1`` Gateway
URL, and READY names it again as ``resume_gateway_url``. So discord.py's HTTP client (its
rate-limit handling, multipart uploads, error mapping) and its Gateway client (heartbeats,
identify, resume) all run for real. REST implements what the adapter calls — ``users/@me``,
``gateway/bot``, ``applications/@me``, creating and editing messages (JSON or multipart with
files), typing — plus attachment downloads; every call is recorded, and failures can be
injected per route (``fail``) or as a switchable outage (``set_outage``):

    async with FakeDiscordAPI() as dc:
        await dc.push_dm(user=USER, text="hi")
        dc.fail("POST /messages", 429, retry_after=0.2)
        await dc.gateway.drop()
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import itertools
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.discord_gateway import FakeGateway

TOKEN = "MTA5ODc2.fake-discord.bot-token-for-tests_0123456789"
BOT_ID = 1098765432109876543
APP_FLAGS_MESSAGE_CONTENT = 1 << 19  # GATEWAY_MESSAGE_CONTENT_LIMITED
GUILD_ID = 2000000000000000001
GUILD_CHANNEL = 2000000000000000002
THREAD_ID = 2000000000000000003


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any] | None
    files: dict[str, bytes] = field(default_factory=dict)
    at: float = 0.0

    @property
    def route(self) -> str:
        """``POST /messages``, ``PATCH /messages``, ``POST /typing``, ``GET /users/@me``..."""
        parts = [p for p in self.path.split("/") if p and not p.isdigit() and p not in ("api", "v10")]
        tail = parts[-1] if parts[-1] in ("messages", "typing") else "/".join(parts)
        return f"{self.method} /{tail}"


@dataclass
class Fault:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def user(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {"id": str(user_id), "username": name, "discriminator": "0", "global_name": name.title(),
            "avatar": None, "bot": bot}


class FakeDiscordAPI:
    def __init__(self, *, token: str = TOKEN) -> None:
        self.token = token
        self.bot = user(BOT_ID, "lucid", bot=True)
        self.app_flags = APP_FLAGS_MESSAGE_CONTENT
        self.gateway = FakeGateway(self)
        self.guilds: dict[int, dict[str, Any]] = {GUILD_ID: _guild()}
        self.calls: list[Call] = []
        self.sent: dict[int, dict[str, Any]] = {}  # messages the bot created, by id (edits applied)
        self.attachments: dict[str, bytes] = {}
        self.history: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)  # by channel id
        self.faults: dict[str, collections.deque[Fault]] = collections.defaultdict(collections.deque)
        self.outage: int | None = None  # a status every create/edit answers, while set
        self.on_call: list[Callable[[Call], None]] = []
        self._interactions: dict[str, str] = {}  # interaction id -> its token
        self.answered: list[tuple[str, int]] = []  # interaction callbacks: (interaction id, response type)
        self._ids = itertools.count(3_000_000_000_000_000_000)
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()
        self.base_url = self.gateway_url = self.origin = ""

    # -- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> FakeDiscordAPI:
        app = web.Application()
        app.router.add_get("/gateway", self.gateway.handle)
        app.router.add_get("/attachments/{name}", self._download)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        port = sock.getsockname()[1]
        self.origin = f"http://127.0.0.1:{port}"
        self.base_url, self.gateway_url = f"{self.origin}/api", f"ws://127.0.0.1:{port}/gateway"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- scripting -----------------------------------------------------------------------
    def fail(self, route: str, status: int, *, retry_after: float | None = None, times: int = 1,
             message: str = "injected failure") -> None:
        """The next ``times`` calls of ``route`` (see ``Call.route``) answer ``status``."""
        body: dict[str, Any] = {"message": message, "code": 0}
        headers = {"Via": "1.1 google"}
        if retry_after is not None:
            body.update(retry_after=retry_after, **{"global": False})
            headers["Retry-After"] = str(retry_after)
        for _ in range(times):
            self.faults[route].append(Fault(status, body, headers))

    def set_outage(self, status: int | None) -> None:
        self.outage = status

    def calls_to(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    def texts(self, channel_id: int | None = None) -> list[str]:
        """What the bot's messages show now (after edits), oldest first."""
        return [m["content"] for m in self.sent.values()
                if channel_id is None or m["channel_id"] == str(channel_id)]

    def add_attachment(self, name: str, content: bytes, content_type: str = "text/plain") -> dict[str, Any]:
        self.attachments[name] = content
        return {"id": str(next(self._ids)), "filename": name, "size": len(content),
                "url": f"{self.origin}/attachments/{name}", "proxy_url": f"{self.origin}/attachments/{name}",
                "content_type": content_type}

    async def push_dm(self, *, user_id: int, text: str, name: str = "ann",
                      attachments: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        """A direct message from ``user_id`` in the DM channel of the same id."""
        return await self.push(self.message(user_id + 1, user(user_id, name), text, attachments=list(attachments)))

    async def push(self, message: dict[str, Any]) -> dict[str, Any]:
        """Post ``message`` (kept in its channel's history) and dispatch it on the Gateway."""
        if all(m["id"] != message["id"] for m in self.history[message["channel_id"]]):
            self.history[message["channel_id"]].append(message)
        await self.gateway.dispatch("MESSAGE_CREATE", message)
        return message

    def message(self, channel_id: int, author: dict[str, Any], text: str, *, guild_id: int | None = None,
                mentions: list[dict[str, Any]] = (), reply_to: dict[str, Any] | None = None,  # type: ignore[assignment]
                attachments: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        msg: dict[str, Any] = {
            "id": str(next(self._ids)), "channel_id": str(channel_id), "author": author, "content": text,
            "timestamp": dt.datetime.now(dt.UTC).isoformat(), "edited_timestamp": None, "tts": False,
            "mention_everyone": False, "mentions": list(mentions), "mention_roles": [],
            "attachments": list(attachments), "embeds": [], "pinned": False, "type": 19 if reply_to else 0}
        if guild_id is not None:
            msg["guild_id"] = str(guild_id)
        if reply_to is not None:
            msg["message_reference"] = {"message_id": reply_to["id"], "channel_id": reply_to["channel_id"]}
            msg["referenced_message"] = reply_to
        return msg

    async def push_press(self, *, user_id: int, channel_id: int, custom_id: str,
                         guild_id: int | None = None, name: str = "ann") -> str:
        """A press of a button (``custom_id``) by ``user_id``: an ``INTERACTION_CREATE`` as
        Discord sends it (a guild press names a member, a DM press a user); returns its id."""
        interaction_id = str(next(self._ids))
        self._interactions[interaction_id] = f"itoken-{interaction_id}"
        who = user(user_id, name)
        data: dict[str, Any] = {
            "id": interaction_id, "application_id": str(BOT_ID), "type": 3, "token": f"itoken-{interaction_id}",
            "version": 1, "attachment_size_limit": 8 * 1024 * 1024, "locale": "en-US", "app_permissions": "0",
            "entitlements": [], "channel_id": str(channel_id),
            "channel": {"id": str(channel_id), "type": 1 if guild_id is None else 0},
            "data": {"custom_id": custom_id, "component_type": 2}}
        if guild_id is None:
            data["user"] = who
        else:
            data["guild_id"] = str(guild_id)
            data["channel"].update(guild_id=str(guild_id), name="general", position=0)
            data["member"] = {"user": who, "roles": [], "joined_at": dt.datetime.now(dt.UTC).isoformat(),
                              "deaf": False, "mute": False, "flags": 0, "permissions": "0"}
        await self.gateway.dispatch("INTERACTION_CREATE", data)
        return interaction_id

    def ready_payload(self, session_id: str) -> dict[str, Any]:
        return {"v": 10, "user": self.bot, "session_id": session_id, "resume_gateway_url": self.gateway_url,
                "guilds": [{"id": str(g), "unavailable": True} for g in self.guilds],
                "application": {"id": str(BOT_ID), "flags": self.app_flags}, "private_channels": []}

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- REST ----------------------------------------------------------------------------
    async def _rest(self, request: web.Request) -> web.StreamResponse:
        body, files = await _read_body(request)
        call = Call(request.method, request.path, body, files, asyncio.get_running_loop().time())
        self.calls.append(call)
        for observer in self.on_call:
            observer(call)
        self.notify()
        parts = request.path.split("/")[3:]  # after /api/v10
        if parts[:1] == ["interactions"]:  # answered with the interaction's own token, no bot token
            known = len(parts) == 4 and self._interactions.get(parts[1]) == parts[2]
            return self._answer(request.method, parts, body or {}, files, {}) if known else \
                _json({"message": "Unknown interaction", "code": 10062}, status=404)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        faults = self.faults.get(call.route)
        if faults:
            fault = faults.popleft()
            return _json(fault.body, status=fault.status, headers=fault.headers)
        if self.outage is not None and call.route in ("POST /messages", "PATCH /messages"):
            return _json({"message": "outage", "code": 0}, status=self.outage,
                                     headers={"Via": "1.1 google"})
        return self._answer(request.method, parts, body or {}, files, dict(request.query))

    def _answer(self, method: str, parts: list[str], body: dict[str, Any],
                files: dict[str, bytes], query: dict[str, str]) -> web.Response:
        if method == "GET" and parts == ["users", "@me"]:
            return _json(self.bot)
        if method == "GET" and parts == ["gateway", "bot"]:
            return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": {
                "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})
        if method == "GET" and parts in (["applications", "@me"], ["oauth2", "applications", "@me"]):
            return _json({"id": str(BOT_ID), "name": "lucid", "description": "", "icon": None,
                          "bot_public": False, "bot_require_code_grant": False, "verify_key": "0" * 64,
                          "owner": user(1, "owner"), "flags": self.app_flags})
        if len(parts) == 4 and parts[0] == "interactions" and parts[3] == "callback" and method == "POST":
            kind = int(body.get("type", 0))
            self.answered.append((parts[1], kind))
            # discord.py asks ``with_response``: the interaction callback response object
            return _json({"interaction": {"id": parts[1], "type": 3, "response_message_loading": False,
                                          "response_message_ephemeral": False}, "resource": {"type": kind}})
        if len(parts) >= 3 and parts[0] == "channels" and parts[2] == "typing" and method == "POST":
            return web.Response(status=204)
        if len(parts) == 3 and parts[0] == "channels" and parts[2] == "messages" and method == "GET":
            return self._history(parts[1], query)
        if len(parts) == 3 and parts[0] == "channels" and parts[2] == "messages" and method == "POST":
            return self._create(parts[1], body, files)
        if len(parts) == 4 and parts[0] == "channels" and parts[2] == "messages" and method == "PATCH":
            message = self.sent.get(int(parts[3]))
            if message is None:
                return _json({"message": "Unknown Message", "code": 10008}, status=404)
            message["content"] = body.get("content", message["content"])
            message["edits"] += 1
            return _json(message)
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    def _create(self, channel_id: str, body: dict[str, Any], files: dict[str, bytes]) -> web.Response:
        content = body.get("content") or ""
        if len(content) > 2000:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        if not content and not files:
            return _json({"message": "Cannot send an empty message", "code": 50006}, status=400)
        message = self.message(int(channel_id), self.bot, content)
        message["attachments"] = [{"id": str(next(self._ids)), "filename": n, "size": len(b), "url": "",
                                   "proxy_url": ""} for n, b in files.items()]
        message["edits"] = 0
        message["reference"] = body.get("message_reference")
        message["allowed_mentions"] = body.get("allowed_mentions")
        self.sent[int(message["id"])] = message
        self.history[channel_id].append(message)
        return _json(message)

    def _history(self, channel_id: str, query: dict[str, str]) -> web.Response:
        """Like Discord: the ``limit`` messages right after ``after``, newest first."""
        after, limit = int(query.get("after", "0")), min(int(query.get("limit", "50")), 100)
        found = sorted((m for m in self.history[channel_id] if int(m["id"]) > after), key=lambda m: int(m["id"]))
        return _json(list(reversed(found[:limit])))

    async def _download(self, request: web.Request) -> web.Response:
        data = self.attachments.get(request.match_info["name"])
        return web.Response(body=data) if data is not None else web.Response(status=404)


def _json(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON with Discord's exact content type (discord.py parses only ``application/json``)."""
    return web.Response(body=json.dumps(data).encode(), status=status,
                        headers={**(headers or {}), "Content-Type": "application/json"})


async def _read_body(request: web.Request) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    if request.content_type == "application/json":
        return await request.json(), {}
    if request.content_type.startswith("multipart/"):
        body: dict[str, Any] | None = None
        files: dict[str, bytes] = {}
        reader = await request.multipart()
        async for part in reader:
            if part.name == "payload_json":
                body = json.loads(await part.text())
            elif part.filename:
                files[part.filename] = bytes(await part.read())
        return body, files
    return None, {}


def _guild() -> dict[str, Any]:
    everyone = {"id": str(GUILD_ID), "name": "@everyone", "permissions": "0", "position": 0, "color": 0,
                "hoist": False, "managed": False, "mentionable": False}
    return {"id": str(GUILD_ID), "name": "Friends", "unavailable": False, "member_count": 3, "large": False,
            "features": [], "emojis": [], "stickers": [], "roles": [everyone], "members": [],
            "voice_states": [], "presences": [], "owner_id": "1",
            "channels": [{"id": str(GUILD_CHANNEL), "type": 0, "name": "general", "position": 0,
                          "guild_id": str(GUILD_ID), "permission_overwrites": []}],
            "threads": [{"id": str(THREAD_ID), "type": 11, "name": "a thread", "parent_id": str(GUILD_CHANNEL),
                         "guild_id": str(GUILD_ID), "owner_id": "1", "message_count": 0, "member_count": 1,
                         "rate_limit_per_user": 0, "flags": 0, "thread_metadata": {
                             "archived": False, "auto_archive_duration": 1440, "locked": False,
                             "archive_timestamp": "2026-01-01T00:00:00+00:00"}}]}
