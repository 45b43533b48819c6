"""A DingTalk stand-in on loopback (Stream-mode gateway + OpenAPI), for the real SDK to talk to.

It speaks what ``dingtalk-stream`` and the channel use: ``POST /v1.0/gateway/connections/open``
(the app's credentials in, an endpoint and a one-time ticket out), the websocket at that
endpoint (robot messages pushed as ``CALLBACK`` frames, ``SYSTEM`` ping/disconnect frames, and
the ACK frames the SDK sends back, recorded by message id; a robot message not yet ACKed is
sent again on the next socket, as DingTalk redelivers), each conversation's session
webhook (``/robot/sendBySession``), ``POST /v1.0/oauth2/accessToken`` and the robot's OpenAPI
sends (``oToMessages/batchSend``, ``groupMessages/send``). Every message the robot sent is
recorded as a ``Sent``; ``expire_webhooks()`` makes the session webhooks refuse from then on,
as DingTalk does once one has expired; ``mute()`` stops answering the current socket's pings:

    async with FakeDingTalk() as dt:
        frame = await dt.push(dt.robot_message("hello", sender="staff-1"))
        await dt.acked(frame)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

CLIENT_ID = "dingtestclientid0001"
CLIENT_SECRET = "dingtalk-test-secret-0123456789abcdefghijklmnopqrstuv"
BOT_USER_ID = "$:LWCP_v1:$robot0001"
ROBOT_TOPIC = "/v1.0/im/bot/messages/get"
EXPIRED_ERRCODE = 300001  # what the stand-in's refused session webhook answers


@dataclass(frozen=True)
class Sent:
    via: str  # "webhook" or "openapi"
    chat: str  # the conversation id (webhook, group send) or the user id (batchSend)
    msgtype: str  # "markdown" or "text"
    text: str
    title: str = ""


class FakeDingTalk:
    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.acks: dict[str, dict[str, Any]] = {}  # frame message id -> the ACK frame
        self.opened: list[dict[str, Any]] = []  # bodies of the connection-open requests
        self.connections = 0  # websockets accepted
        self.tokens_issued = 0
        self.webhooks_expired = False
        self.hang_opens = 0  # this many connection-open requests are never answered
        self.base_url = ""
        self._tickets: set[str] = set()
        self._sessions: dict[str, str] = {}  # session token -> conversation id
        self._ws: web.WebSocketResponse | None = None
        self._muted: web.WebSocketResponse | None = None
        self._unacked: dict[str, str] = {}  # frame id -> frame: sent again on the next socket
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # -- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> FakeDingTalk:
        app = web.Application()
        app.router.add_post("/v1.0/gateway/connections/open", self._open)
        app.router.add_get("/stream", self._stream)
        app.router.add_post("/v1.0/oauth2/accessToken", self._token)
        app.router.add_post("/v1.0/robot/oToMessages/batchSend", self._to_person)
        app.router.add_post("/v1.0/robot/groupMessages/send", self._to_group)
        app.router.add_post("/robot/sendBySession", self._webhook)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- scripting -----------------------------------------------------------------------
    def robot_message(self, text: str, *, sender: str, conversation: str | None = None, group: bool = False,
                      at_bot: bool = True, msg_id: str | None = None, nick: str = "Someone",
                      webhook_expires_in_s: float = 5400.0) -> dict[str, Any]:
        """A robot callback's data as DingTalk sends it (a private chat unless ``group``)."""
        conversation = conversation or (f"cid-group-{sender}" if group else f"cid-private-{sender}")
        session = f"session-{conversation}"
        self._sessions[session] = conversation
        now_ms = int(time.time() * 1000)
        data: dict[str, Any] = {
            "conversationId": conversation, "chatbotCorpId": "ding-corp", "chatbotUserId": BOT_USER_ID,
            "msgId": msg_id or f"msg{next(self._ids):08d}", "senderNick": nick, "isAdmin": False,
            "senderStaffId": sender, "sessionWebhookExpiredTime": now_ms + int(webhook_expires_in_s * 1000),
            "createAt": now_ms, "senderCorpId": "ding-corp", "conversationType": "2" if group else "1",
            "senderId": f"$:LWCP_v1:${sender}",
            "sessionWebhook": f"{self.base_url}/robot/sendBySession?session={session}",
            "robotCode": CLIENT_ID, "msgtype": "text", "text": {"content": text},
        }
        if group:
            data.update(conversationTitle="Team room", isInAtList=at_bot,
                        atUsers=[{"dingtalkId": BOT_USER_ID}] if at_bot else [])
        return data

    async def push(self, data: dict[str, Any], *, topic: str = ROBOT_TOPIC, frame_id: str | None = None) -> str:
        """Send one CALLBACK frame carrying ``data``; returns the frame's message id."""
        frame_id = frame_id or f"frame-{next(self._ids)}"
        headers = {"appId": "app-1", "connectionId": "conn-1", "contentType": "application/json",
                   "messageId": frame_id, "time": str(int(time.time() * 1000)), "topic": topic}
        await self._send_frame({"specVersion": "1.0", "type": "CALLBACK", "headers": headers,
                                "data": json.dumps(data)})
        return frame_id

    async def system(self, topic: str, data: dict[str, Any] | None = None) -> str:
        """A SYSTEM frame (``ping``, ``disconnect``)."""
        frame_id = f"sys-{next(self._ids)}"
        await self._send_frame({"specVersion": "1.0", "type": "SYSTEM",
                                "headers": {"messageId": frame_id, "topic": topic, "contentType": "application/json"},
                                "data": json.dumps(data or {})})
        return frame_id

    async def acked(self, frame_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """The ACK the client sent for ``frame_id`` (waits for it; fails after ``timeout``)."""
        async with asyncio.timeout(timeout):
            while frame_id not in self.acks:
                await self._wait_change()
        return self.acks[frame_id]

    async def wait_connected(self, count: int = 1, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while self.connections < count or self._ws is None:
                await self._wait_change()

    def expire_webhooks(self) -> None:
        self.webhooks_expired = True

    def mute(self) -> None:
        """The current socket goes silent: its pings go unanswered (a later socket answers)."""
        self._muted = self._ws

    def disconnected(self) -> bool:
        return self._ws is None or self._ws.closed

    def texts(self) -> list[str]:
        return [s.text for s in self.sent]

    # -- internals -----------------------------------------------------------------------
    async def _wait_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    def _changed_now(self) -> None:
        self._changed.set()

    async def _send_frame(self, frame: dict[str, Any]) -> None:
        text = json.dumps(frame)
        if frame["type"] == "CALLBACK":
            self._unacked[frame["headers"]["messageId"]] = text
        if self._ws is None or self._ws.closed:
            return  # goes out when the client connects again, as DingTalk redelivers
        try:
            await self._ws.send_str(text)
        except ConnectionError:
            pass

    async def _open(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.opened.append(body)
        self._changed_now()
        if self.hang_opens > 0:
            self.hang_opens -= 1
            await asyncio.Event().wait()  # until the client gives up (the handler is cancelled)
        if body.get("clientId") != CLIENT_ID or body.get("clientSecret") != CLIENT_SECRET:
            return web.json_response({"code": "InvalidAuthentication", "message": "bad credentials"}, status=401)
        ticket = f"ticket-{next(self._ids)}"
        self._tickets.add(ticket)
        return web.json_response({"endpoint": f"ws://127.0.0.1:{self.port}/stream", "ticket": ticket})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=403, text="unknown ticket")
        self._tickets.discard(ticket)  # one use
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        self._ws = ws
        self.connections += 1
        self._changed_now()
        for text in list(self._unacked.values()):  # what the last socket never acknowledged
            await ws.send_str(text)
        async for msg in ws:
            if msg.type == WSMsgType.PING:
                if ws is not self._muted:
                    await ws.pong(msg.data)
            elif msg.type == WSMsgType.TEXT:
                frame = json.loads(msg.data)
                frame_id = str(frame.get("headers", {}).get("messageId", ""))
                self.acks[frame_id] = frame
                self._unacked.pop(frame_id, None)
                self._changed_now()
        return ws

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("appKey") != CLIENT_ID or body.get("appSecret") != CLIENT_SECRET:
            return web.json_response({"code": "invalidClientIdOrSecret", "message": "bad app key"}, status=400)
        self.tokens_issued += 1
        return web.json_response({"accessToken": f"token-{self.tokens_issued}", "expireIn": 7200})

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("x-acs-dingtalk-access-token") == f"token-{self.tokens_issued}"

    async def _to_person(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not self._authorised(request) or body.get("robotCode") != CLIENT_ID:
            return web.json_response({"code": "InvalidAuthentication", "message": "token"}, status=401)
        for user in body.get("userIds", []):
            self._record_openapi(user, body)
        return web.json_response({"processQueryKey": f"q-{next(self._ids)}", "invalidStaffIdList": []})

    async def _to_group(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not self._authorised(request) or body.get("robotCode") != CLIENT_ID:
            return web.json_response({"code": "InvalidAuthentication", "message": "token"}, status=401)
        self._record_openapi(str(body.get("openConversationId")), body)
        return web.json_response({"processQueryKey": f"q-{next(self._ids)}"})

    def _record_openapi(self, chat: str, body: dict[str, Any]) -> None:
        param = json.loads(body.get("msgParam") or "{}")
        kind = "markdown" if body.get("msgKey") == "sampleMarkdown" else "text"
        self.sent.append(Sent("openapi", chat, kind, param.get("text") or param.get("content") or "",
                              param.get("title", "")))
        self._changed_now()

    async def _webhook(self, request: web.Request) -> web.Response:
        conversation = self._sessions.get(request.query.get("session", ""))
        if conversation is None or self.webhooks_expired:
            return web.json_response({"errcode": EXPIRED_ERRCODE, "errmsg": "session expired"})
        body = await request.json()
        kind = str(body.get("msgtype"))
        part = body.get(kind) or {}
        self.sent.append(Sent("webhook", conversation, kind, part.get("text") or part.get("content") or "",
                              part.get("title", "")))
        self._changed_now()
        return web.json_response({"errcode": 0, "errmsg": "ok"})
