"""Sessions: every transcript on disk, one opened for reading, and ``/new`` from the page.

``/new`` goes through the bus like a typed command, so it is ordered with the session's
turns (never racing one) and archives the conversation to memory exactly as typing it
would; its confirmation is answered in the session's own chat.

Per agent (``?agent=<id>``): the sessions of that agent's workspace only. A key is looked up
in that agent's ``sessions/`` folder and nowhere else, so another agent's key (or a path
written as a key) is simply not found there.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from lucidgate.channels.bus import BusClosed, BusFull
from lucidgate.channels.messages import InboundMessage, SessionRef
from lucidgate.gateway.agent.roles import line_role
from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.memory.sessions import load_session_file, read_header

if TYPE_CHECKING:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.config.schema import Config
    from lucidgate.channels.web import WebChannel
    from lucidgate.gateway.console.auth import ConsoleAuth
    from lucidgate.gateway.model.usage import UsageLedger
    from lucidgate.memory.sessions import SessionStore


class SessionItem(BaseModel):
    key: str
    channel: str
    chat_id: str
    last_activity: str
    messages: int
    tokens: int


class ToolCallView(BaseModel):
    id: str | None
    name: str
    arguments: str


class TranscriptLine(BaseModel):
    role: str
    content: str
    timestamp: str | None
    name: str | None = None
    status: str | None = None
    sender_id: str | None = None
    tool_calls: list[ToolCallView] = []
    attachments: list[str] = []


class Transcript(BaseModel):
    key: str
    archived: int
    messages: list[TranscriptLine]


class NewSession(BaseModel):
    key: str
    sent: bool


def _scan(folder: Path, tokens: dict[str, int], stamp: str = "") -> list[SessionItem]:
    items: list[SessionItem] = []
    if not folder.exists():
        return items
    for path in folder.glob("*.jsonl"):
        header = read_header(path)
        if header is None:
            continue
        key = str(header["key"])
        with path.open("rb") as fh:
            count = sum(1 for line in fh if line.strip()) - 1
        mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
        channel, _, chat = key.removeprefix(f"{stamp}:" if stamp else "").partition(":")
        items.append(SessionItem(key=key, channel=channel, chat_id=chat, last_activity=mtime,
                                 messages=max(0, count), tokens=tokens.get(key, 0)))
    items.sort(key=lambda s: s.last_activity, reverse=True)
    return items


def _text(content: Any) -> tuple[str, list[str]]:
    """Plain text of a message and the names of its images/files."""
    if isinstance(content, str):
        return content, []
    texts, names = [], []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            names.append("image" if url.startswith("data:") else f"image {url[:80]}")
        else:
            names.append(str(part.get("name") or part.get("type") or "file"))
    return "\n".join(texts), names


def line_view(msg: dict[str, Any]) -> TranscriptLine:
    text, names = _text(msg.get("content"))
    names += [str(m).rsplit("/", 1)[-1] for m in msg.get("media") or []]
    calls = []
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        calls.append(ToolCallView(id=call.get("id"), name=str(fn.get("name", "?")),
                                  arguments=args if isinstance(args, str) else json.dumps(args)))
    return TranscriptLine(role=str(msg.get("role")), content=text, timestamp=msg.get("timestamp"),
                          name=msg.get("name"), status=msg.get("status"), sender_id=msg.get("sender_id"),
                          tool_calls=calls, attachments=names)


@dataclass(frozen=True)
class SessionsParts:
    """One agent's sessions and usage; ``config`` (the agent's) answers the role of a chat's
    sender whose line predates stamped roles; ``stamp`` prefixes its keys ("": the default)."""

    config: Config
    store: SessionStore
    usage: UsageLedger
    stamp: str = ""
    pin: str = ""  # what a message names to reach this agent whatever the bindings say ("": let them decide)


def router(auth: ConsoleAuth, *, web: WebChannel, bus: MessageBus, agents: PerAgent[SessionsParts]) -> APIRouter:
    api = APIRouter(prefix="/api/console/sessions", tags=[TAG], dependencies=[owner_dependency(auth)],
                    responses=REFUSALS)
    agent = agents.dependency()

    async def transcript_path(store: SessionStore, key: str) -> Path:
        path = store.path_for(key)
        if not await asyncio.to_thread(path.exists):
            raise HTTPException(404, f"no session {key!r}")
        return path

    @api.get("", response_model=list[SessionItem], summary="Every session: channel, chat, activity, size")
    async def sessions(s: SessionsParts = agent) -> list[SessionItem]:
        def scan() -> list[SessionItem]:
            summary = s.usage.summarise(days=30)
            return _scan(s.store.dir, {k: t.total for k, t in summary.by_session.items()}, s.stamp)

        return await asyncio.to_thread(scan)

    @api.get("/transcript", response_model=Transcript, summary="One session's transcript",
             responses={404: {"description": "No such session."}})
    async def transcript(key: str = Query(..., max_length=300),
                         limit: int = Query(500, ge=1, le=5000), s: SessionsParts = agent) -> Transcript:
        path = await transcript_path(s.store, key)
        forgotten = s.store.tombstones
        session = await asyncio.to_thread(  # what the owner asked to forget is not shown
            lambda: load_session_file(path, key, redact=forgotten.matcher() if forgotten else None))
        shown = session.messages[-limit:]
        return Transcript(key=key, archived=session.last_consolidated, messages=[line_view(m) for m in shown])

    @api.post("/new", response_model=NewSession, status_code=202,
              summary="Send /new to a session: archive it to memory and start fresh",
              responses={404: {"description": "No such session."}, 503: {"description": "Busy; retry."}})
    async def new(key: str = Query(..., max_length=300), s: SessionsParts = agent) -> NewSession:
        path = await transcript_path(s.store, key)
        session = await asyncio.to_thread(load_session_file, path, key)
        channel, _, chat_id = key.removeprefix(f"{s.stamp}:" if s.stamp else "").partition(":")
        origin = SessionRef.from_stored(session.metadata) or SessionRef(channel, chat_id)
        try:
            if origin.channel == web.name:
                await web.post_wire(origin.chat_id, "/new")
            else:
                # Sent as the chat's latest sender, in the role they were admitted in: the
                # console acts on the chat, it does not make a guest's chat the owner's.
                last = next((m for m in reversed(session.messages)
                             if m.get("role") == "user" and m.get("sender_id")), {"sender_id": "console"})
                await bus.publish_inbound(InboundMessage(
                    channel=origin.channel, chat_id=origin.chat_id, sender_id=str(last["sender_id"]),
                    text="/new", chat_type=origin.chat_type, thread_id=origin.thread_id,
                    message_id=f"console-new-{uuid.uuid4().hex}", agent=s.pin or s.stamp,
                    role=line_role(s.config, origin.channel, last)), timeout=10)
        except (BusFull, BusClosed) as exc:
            raise HTTPException(503, str(exc)) from None
        return NewSession(key=key, sent=True)

    return api
