"""WebChannel: the console's chat, one browser tab (or chosen chat) per session.

Inbound: ``post(chat_id, text)`` publishes an ``InboundMessage`` from the console user
(``sender_id`` "console", a private chat: the owner) and records a ``user`` event.
Outbound: replies and errors become durable ``ChatLog`` events; typing and streaming
previews go only to the tabs listening right now. A tab subscribes with the last event
id it saw and gets the missed events, then live ones — never one twice.

The channel knows nothing about HTTP or authentication (``gateway/console`` does that) and
nothing about the agent: tool calls of a turn come from the ``TurnTools`` view it is built with.

Several agents: a chat belongs to one agent (``agent``: its id as messages carry it, "" for
the default agent). Its messages name that agent (the default one by its id, which the
router turns into ""), so they reach it whatever the bindings say, and its log lives in that
agent's workspace (``workspaces``). Replies carry no agent, so on the bus a non-default
agent's chat is named ``<agent>.<chat id>`` (a dot is in neither an agent id nor a chat id):
its session key is ``work:web:work.<chat id>``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Protocol

from lucidgate.channels._ratelimit import DeliveryRetry
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import InboundMessage, OutboundMessage, OutboundText
from lucidgate.channels.outfiles import unsent_note
from lucidgate.channels.web.log import ChatEvent, ChatLog, EventType

logger = logging.getLogger(__name__)

NAME = "web"
SENDER = "console"
CHAT_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
PUBLISH_TIMEOUT_S = 10.0



class TurnTools(Protocol):
    """Where the tool calls of a session's latest turn are read, for the reply event."""

    async def turn_tools(self, key: str) -> list[dict[str, Any]]: ...

    def for_agent(self, agent: str) -> TurnTools | None: ...


def wire_id(chat_id: str, agent: str) -> str:
    """The chat id on the bus: the console's for the default agent, ``<agent>.<chat>`` else."""
    return f"{agent}.{chat_id}" if agent else chat_id


def split_wire(wire: str) -> tuple[str, str]:
    """(agent, chat id) of a chat id on the bus."""
    agent, dot, chat_id = wire.partition(".")
    return (agent, chat_id) if dot else ("", wire)


class ChatIdInvalid(ValueError):
    """A chat id that is not 1-64 letters, digits or dashes."""


@dataclass(frozen=True, slots=True)
class Live:
    """Something for the tabs listening now: a durable event, or typing / a preview."""

    kind: str  # "event", "typing", "activity", "progress", "end"
    event: ChatEvent | None = None
    text: str = ""


class Subscription:
    def __init__(self, channel: WebChannel, chat_id: str, backlog: list[ChatEvent]) -> None:
        self.channel = channel
        self.chat_id = chat_id
        self.backlog = backlog
        self.queue: asyncio.Queue[Live] = asyncio.Queue()
        self.last_id = backlog[-1].id if backlog else 0

    async def next(self) -> Live:
        """The next live item, skipping events already delivered from the backlog."""
        while True:
            item = await self.queue.get()
            if item.event is not None:
                if item.event.id <= self.last_id:
                    continue
                self.last_id = item.event.id
            return item

    def close(self) -> None:
        self.channel._unsubscribe(self)


class WebChannel:
    name = NAME

    def __init__(self, bus: MessageBus, *, workspace: Path, turns: TurnTools | None = None,
                 workspaces: Mapping[str, Path] | None = None, default_agent: str = "") -> None:
        """``turns``: the root's read-only transcript view, so each reply shows its turn's tool
        calls (without one, as in a channel built alone, replies come without them).
        ``workspaces``: the other agents' workspaces by id, where their chats are kept;
        ``default_agent``: the default agent's id, which its chats name to the router."""
        self.bus = bus
        # With several agents even the default agent's chat names its agent, so no binding
        # (one on the "web" channel) sends it elsewhere; alone, it names none, as before.
        self._default_pin = default_agent if workspaces else ""
        self.log = ChatLog(workspace / "state" / "web")
        self._logs = {"": self.log} | {agent: ChatLog(ws / "state" / "web")
                                       for agent, ws in (workspaces or {}).items() if agent}
        self._turns = turns
        self._subs: dict[str, set[Subscription]] = {}
        self._running = False

    def describe(self) -> str:
        return "the web console's chat"

    def is_owner(self, sender_id: str) -> bool:
        return sender_id == SENDER

    async def start(self) -> None:
        self.bus.subscribe(NAME, self.send)
        self._running = True

    async def stop(self) -> None:
        self._running = False
        self.bus.unsubscribe(NAME)
        await self.drain()

    async def drain(self) -> None:
        """End every open stream so the server can close its connections."""
        for subs in list(self._subs.values()):
            for sub in list(subs):
                sub.queue.put_nowait(Live("end"))

    @property
    def running(self) -> bool:
        return self._running

    # -- inbound -----------------------------------------------------------------------
    @staticmethod
    def check_chat_id(chat_id: str) -> str:
        if not CHAT_ID.match(chat_id):
            raise ChatIdInvalid("a chat id is 1-64 letters, digits or dashes")
        return chat_id

    @staticmethod
    def session_key(chat_id: str, agent: str = "") -> str:
        key = f"{NAME}:{wire_id(chat_id, agent)}"
        return f"{agent}:{key}" if agent else key

    def _log(self, agent: str) -> ChatLog:
        log = self._logs.get(agent)
        if log is None:
            raise ChatIdInvalid(f"no agent {agent!r} has web chats here")
        return log

    async def post(self, chat_id: str, text: str, *, agent: str = "") -> ChatEvent:
        """Hand the console user's message to the agent; raises BusFull/BusClosed if refused."""
        self.check_chat_id(chat_id)
        log = self._log(agent)
        await log.load(chat_id)
        message_id = uuid.uuid4().hex
        wire = wire_id(chat_id, agent)
        msg = InboundMessage(channel=NAME, chat_id=wire, sender_id=SENDER, text=text,
                             chat_type="private", message_id=message_id, sender_name="console",
                             role="owner", agent=agent or self._default_pin)  # the console's login is the owner's
        await self.bus.publish_inbound(msg, timeout=PUBLISH_TIMEOUT_S)
        # Numbered right after acceptance with no await in between: the reply, however
        # quick, always gets a later id than the message it answers.
        event = log.add(chat_id, "user", text, message_id=message_id)
        self._fan_out(wire, Live("event", event))
        await log.persist(chat_id, event)
        return event

    async def post_wire(self, wire: str, text: str) -> ChatEvent:
        """``post`` to a chat named as on the bus (a session's origin)."""
        agent, chat_id = split_wire(wire)
        return await self.post(chat_id, text, agent=agent)

    # -- outbound ----------------------------------------------------------------------
    async def send(self, msg: OutboundMessage) -> None:
        wire = msg.target.chat_id
        if msg.kind == "typing":
            self._fan_out(wire, Live("typing"))
            return
        if msg.kind == "progress":
            if msg.activity:  # "running grep…": the progress line, not the preview
                self._fan_out(wire, Live("activity", text=msg.activity))
            if msg.text:
                self._fan_out(wire, Live("progress", text=msg.text))
            return
        agent, chat_id = split_wire(wire)
        log = self._logs.get(agent)
        if log is None:  # an agent no longer configured: nowhere of its own to keep it
            logger.warning("web: dropped a reply for chat %s of agent %r, which is not configured", chat_id, agent)
            return
        await log.load(chat_id)
        tools: list[dict[str, Any]] = []
        turns = self._turns if not agent or self._turns is None else self._turns.for_agent(agent)
        if msg.kind == "text" and turns is not None:
            try:
                tools = await turns.turn_tools(self.session_key(chat_id, agent))
            except Exception:  # the reply matters more than its tool details
                logger.exception("could not read the tool calls of web:%s", wire)
        kind: EventType = "reply" if msg.kind == "text" else "error"
        retried = log.find(chat_id, kind, msg.in_reply_to) if msg.in_reply_to else None
        text = unsent_note(msg.text, msg.files, "web") if isinstance(msg, OutboundText) else msg.text
        event = retried or log.add(chat_id, kind, text, message_id=msg.in_reply_to, tools=tools)
        if retried is None:
            self._fan_out(wire, Live("event", event))
        try:
            await log.persist(chat_id, event)
        except OSError as exc:  # the outbox retries; the tabs already show it, once
            raise DeliveryRetry(f"could not write the web chat log: {exc}") from exc

    # -- listening tabs ----------------------------------------------------------------
    async def subscribe(self, chat_id: str, last_seen: int, *, agent: str = "") -> Subscription:
        """The events after ``last_seen`` plus a queue of live ones (close it when done)."""
        self.check_chat_id(chat_id)
        log = self._log(agent)
        await log.load(chat_id)
        wire = wire_id(chat_id, agent)
        sub = Subscription(self, wire, log.after(chat_id, last_seen))
        sub.last_id = max(sub.last_id, last_seen)
        self._subs.setdefault(wire, set()).add(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.chat_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.chat_id]

    def _fan_out(self, chat_id: str, item: Live) -> None:
        for sub in list(self._subs.get(chat_id, ())):
            sub.queue.put_nowait(item)

    async def chats(self, *, agent: str = "") -> list[dict[str, Any]]:
        ids = await asyncio.to_thread(self._log(agent).chats)
        return [{"chat_id": c, "session_key": self.session_key(c, agent)} for c in ids if CHAT_ID.match(c)]
