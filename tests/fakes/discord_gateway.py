"""The Gateway half of the Discord stand-in: one websocket endpoint speaking Discord's
opcodes as a client sees them.

HELLO on connect; heartbeats (op 1) ACKed (op 11) unless switched off; IDENTIFY (op 2)
checked (token; the Message Content intent asked for and enabled, else close 4014) and
answered with READY and a GUILD_CREATE per guild; RESUME (op 6) replays every event of the
session after the client's sequence number, then RESUMED — or INVALID_SESSION for an
unknown session. Events dispatched while no socket is attached wait in the session for the
client's resume, as Discord's do. ``drop()`` aborts the socket (a network failure).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

MESSAGE_CONTENT = 1 << 15


@dataclass
class Session:
    session_id: str
    events: list[dict[str, Any]] = field(default_factory=list)  # every dispatch, with its "s"
    ws: web.WebSocketResponse | None = None
    request: web.Request | None = None

    @property
    def seq(self) -> int:
        return self.events[-1]["s"] if self.events else 0


class FakeGateway:
    """Owned by ``FakeDiscordAPI``: ``ready_payload()`` and ``guilds`` come from it."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.sessions: dict[str, Session] = {}
        self.current: Session | None = None
        self.received: list[tuple[int, Any]] = []  # (op, d) of every client frame
        self.connections = 0
        self.ack_heartbeats = True
        self.heartbeat_interval_ms = 41_250
        self.require_message_content = True  # an identify without the intent gets no content
        self.message_content_enabled = True  # switched on in the Developer Portal (else: 4014)
        self._ids = itertools.count(1)

    # -- scripting --------------------------------------------------------------------
    def ops(self, op: int) -> list[Any]:
        return [d for o, d in self.received if o == op]

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send ``event`` on the live session (or keep it for the client's resume)."""
        session = self.current
        assert session is not None, "no client has identified yet"
        await self._emit(session, event, data)

    async def drop(self) -> None:
        """Cut the live socket without a close frame, as a failed network would."""
        session = self.current
        if session is None or session.ws is None:
            return
        transport = session.request.transport if session.request is not None else None
        session.ws = None
        if transport is not None:
            transport.abort()

    # -- the endpoint -----------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.connections += 1
        session: Session | None = None
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}, "s": None, "t": None})
        async for frame in ws:
            if frame.type is not WSMsgType.TEXT:
                continue
            payload = json.loads(frame.data)
            op, d = payload.get("op"), payload.get("d")
            self.received.append((op, d))
            self.api.notify()
            if op == 1 and self.ack_heartbeats:
                await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
            elif op == 2:
                session = await self._identify(ws, request, d)
            elif op == 6:
                session = await self._resume(ws, request, d)
        if session is not None and session.ws is ws:
            session.ws = None
        return ws

    async def _identify(self, ws: web.WebSocketResponse, request: web.Request,
                        d: dict[str, Any]) -> Session | None:
        if d.get("token") != self.api.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return None
        asked = bool(int(d.get("intents", 0)) & MESSAGE_CONTENT)
        if (self.require_message_content and not asked) or (asked and not self.message_content_enabled):
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return None
        session = Session(f"session-{next(self._ids)}", ws=ws, request=request)
        self.sessions[session.session_id] = session
        self.current = session
        await self._emit(session, "READY", self.api.ready_payload(session.session_id))
        for guild in self.api.guilds.values():
            await self._emit(session, "GUILD_CREATE", guild)
        return session

    async def _resume(self, ws: web.WebSocketResponse, request: web.Request,
                      d: dict[str, Any]) -> Session | None:
        session = self.sessions.get(str(d.get("session_id")))
        if session is None or d.get("token") != self.api.token:
            await ws.send_json({"op": 9, "d": False, "s": None, "t": None})
            return None
        session.ws, session.request = ws, request
        self.current = session
        after = int(d.get("seq") or 0)
        for event in [e for e in session.events if e["s"] > after]:
            await ws.send_json(event)
        await self._emit(session, "RESUMED", {})
        return session

    async def _emit(self, session: Session, event: str, data: dict[str, Any]) -> None:
        frame = {"op": 0, "t": event, "s": session.seq + 1, "d": data}
        session.events.append(frame)
        if session.ws is not None and not session.ws.closed:
            try:
                await session.ws.send_json(frame)
            except (ConnectionError, RuntimeError):
                session.ws = None  # kept in the session: replayed on resume
