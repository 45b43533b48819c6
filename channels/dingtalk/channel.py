"""The DingTalk channel: a robot in Stream mode (no public URL), the official SDK underneath.

Inbound: the SDK's router hands each robot callback (topic ``/v1.0/im/bot/messages/get``) to
``_RobotHandler``; ``format.parse_turn`` decides whether it is a turn (every private message,
a group message only when the robot is @-mentioned); the access gate decides who may talk and
in which role; the message is journalled on the bus, deduplicated by ``dingtalk:<conversation>:
<msgId>`` — and only then does the handler return, so the SDK's ACK follows the journal and a
redelivery of anything un-ACKed (or ACKed then redelivered) is answered once. The chat's way
back (its session webhook, and the ids the OpenAPI send needs) is noted in ``routes``.

Outbound: ``send.DingTalkSender`` behind the bus's durable outbox and one ``OutboundLimiter``;
``stream.StreamSupervisor`` opens the stream and keeps it alive (backoff, watchdog). Every HTTP
call — the connection-open request, the access token, the OpenAPI sends — goes through one
``httpx`` client rooted at ``apiBase``, so tests run the real SDK against a loopback stand-in.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from dingtalk_stream import AckMessage, CallbackMessage, ChatbotHandler, ChatbotMessage

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.dingtalk.format import Turn, parse_turn
from lucidgate.channels.dingtalk.openapi import OpenAPI
from lucidgate.channels.dingtalk.routes import Route, Routes
from lucidgate.channels.dingtalk.sdk import log_targets, quiet_routine, redactor, sdk_logger
from lucidgate.channels.dingtalk.send import DingTalkSender, classify
from lucidgate.channels.dingtalk.settings import DingTalkSettings
from lucidgate.channels.dingtalk.stream import StreamClient, StreamSupervisor
from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.pairing import PairingStore
from lucidgate.channels.messages import InboundMessage, OutboundMessage, Target

logger = logging.getLogger(__name__)

NAME = "dingtalk"


class _RobotHandler(ChatbotHandler):  # type: ignore[misc]  # the SDK is untyped
    """The SDK's robot-message handler: what ``process`` returns becomes the frame's ACK."""

    def __init__(self, accept: Callable[[dict[str, object]], Awaitable[tuple[int, str]]]) -> None:
        super().__init__()
        self.logger = sdk_logger
        self._accept = accept

    async def process(self, callback: CallbackMessage) -> tuple[int, str]:
        return await self._accept(callback.data if isinstance(callback.data, dict) else {})


class DingTalkChannel:
    name = NAME

    def __init__(self, settings: DingTalkSettings, bus: MessageBus, *, workspace: Path,
                 limiter: OutboundLimiter | None = None, gate: AccessGate | None = None,
                 pairing: PairingStore | None = None) -> None:
        self.settings = settings
        self.bus = bus
        self.workspace = Path(workspace)
        self.gate = AccessGate.of_channel(NAME, settings.access, bus, gate=gate, pairing=pairing,
                                          workspace=self.workspace)
        # The session webhook allows 20 messages a minute per chat; bursts of a split reply pass.
        self.limiter = limiter or OutboundLimiter(NAME, classify, rate_per_s=10.0, burst=10,
                                                  per_key_rate_per_s=0.33, per_key_burst=6)
        self._redactor = redactor(settings.client_secret)
        self._http_client: httpx.AsyncClient | None = None
        self._running = False
        self.routes = Routes(self.workspace / "state" / "dingtalk.json")
        self.openapi = OpenAPI(self._client, client_id=settings.client_id, client_secret=settings.client_secret,
                               robot_code=settings.robot_code)
        self.sender = DingTalkSender(self._client, self.openapi, self.routes, self.limiter,
                                     progress_text=settings.progress_text,
                                     webhook_margin_s=settings.webhook_margin_s)
        self.client = StreamClient(settings.client_id, settings.client_secret, sdk_logger=sdk_logger)
        self.client.register_callback_handler(ChatbotMessage.TOPIC, _RobotHandler(self._on_robot_message))
        self.stream = StreamSupervisor(self.client, self._client, watchdog_s=settings.watchdog_s,
                                       ping_interval_s=settings.ping_interval_s,
                                       connect_timeout_s=settings.connect_timeout_s,
                                       backoff_s=settings.reconnect_backoff_s, max_backoff_s=settings.max_backoff_s)

    # -- lifecycle -----------------------------------------------------------------------
    def _client(self) -> httpx.AsyncClient:
        if self._http_client is None:
            raise RuntimeError("the DingTalk channel is not started")
        return self._http_client

    def is_owner(self, sender_id: str) -> bool:
        return self.gate.is_owner(sender_id)

    def describe(self) -> str:
        """The registry's one-line summary (never a secret)."""
        access = self.settings.access
        return (f"stream mode via {self.settings.api_base}, {len(access.allow_from)} allowed, "
                f"{len(access.owners)} owner(s), pairing {access.pairing}")

    async def start(self) -> None:
        self._redactor.install(log_targets())
        quiet_routine()
        self._http_client = httpx.AsyncClient(base_url=self.settings.api_base,
                                              timeout=self.settings.api_timeout_s)
        try:
            await self.routes.load()
            await self.stream.start()  # connects in the background; an outage never fails the start
        except BaseException:
            await self.stop()
            raise
        self.bus.subscribe(NAME, self.send)
        self._running = True
        logger.info("DingTalk channel started (stream mode via %s)", self.settings.api_base)

    async def stop(self) -> None:
        if self._running:  # idempotent: a second stop must not unsubscribe a newer channel
            self.bus.unsubscribe(NAME)
            self._running = False
        await self.stream.stop()
        client, self._http_client = self._http_client, None
        if client is not None:
            await client.aclose()
        self._redactor.uninstall(log_targets())

    # -- inbound -------------------------------------------------------------------------
    async def _on_robot_message(self, data: dict[str, object]) -> tuple[int, str]:
        """One robot callback; the answer is the ACK's (status, message)."""
        turn = parse_turn(data)
        if turn is None:
            return AckMessage.STATUS_OK, "OK"
        await self.routes.note(turn.chat_id, Route(group=turn.chat_type == "group",
                                                   user_id="" if turn.chat_type == "group" else turn.sender_id,
                                                   webhook=turn.webhook, expires_ms=turn.webhook_expires_ms))
        try:
            await self._accept(turn)
        except BusFull:
            # Not accepted: no OK, so DingTalk delivers it again in a moment.
            logger.warning("bus full: DingTalk message for %s not acknowledged; DingTalk will retry", turn.chat_id)
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "busy"
        except BusClosed:  # shutting down: the next start gets it again
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "shutting down"
        return AckMessage.STATUS_OK, "OK"

    async def _accept(self, turn: Turn) -> None:
        knock = AccessRequest(NAME, turn.chat_id, turn.sender_id, None, turn.chat_type)
        decision = await self.gate.admit(knock, reply=Target(NAME, turn.chat_id, None, turn.message_id))
        if not decision.allowed:
            return
        inbound = InboundMessage(channel=NAME, chat_id=turn.chat_id, sender_id=turn.sender_id, text=turn.text,
                                 chat_type=turn.chat_type, message_id=turn.message_id,
                                 sender_name=turn.sender_name, role=decision.role,
                                 account=self.settings.robot_code or None)
        if not await self.bus.publish_inbound(inbound, timeout=2.0):
            logger.info("duplicate DingTalk message %s in %s ignored", turn.message_id, turn.chat_id)

    # -- outbound ------------------------------------------------------------------------
    async def send(self, msg: OutboundMessage) -> None:
        await self.sender.send(msg)
