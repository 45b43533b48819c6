"""The Slack channel: slack-bolt (async) in Socket Mode by default, or HTTP Events mode.

Inbound: Bolt verifies and parses events; ``parse_event`` decides what is a turn (every DM
message; in channels only an @mention, answered in its thread). The listener checks the
sender, downloads attached files, publishes to the bus (journalled) and returns, and only
then does Bolt acknowledge Slack (``process_before_response``), so an acked message is never
lost. Slack's retries carry the same ``event_id`` and message ``ts``: both are deduplicated.
A press of one of our buttons (``block_actions``) is the command it carries, sent by the
presser and admitted by the gate on the presser's id (``press``).

Outbound: Markdown goes out in a ``markdown`` block with a plain-text fallback, long replies
are split, every Web API call goes through one ``OutboundLimiter`` that honours 429
``Retry-After`` and never resends a timed-out post.
A reaction (``:eyes:``) marks the user's message while its turn runs.

The SDK keeps its own HTTP clients; ``apiBase`` is injected as their ``base_url`` so tests
run the real libraries against a loopback stand-in.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from fastapi import APIRouter
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from lucidgate.channels import outfiles
from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry, OutboundLimiter
from lucidgate.channels.base import ChannelUnavailable
from lucidgate.channels.bus import BusFull, MessageBus
from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.pairing import PairingStore
from lucidgate.channels.messages import (
    InboundMessage,
    OutboundError,
    OutboundMessage,
    OutboundProgress,
    OutboundText,
    OutboundTyping,
    Target,
)
from lucidgate.channels.parts import send_parts
from lucidgate.channels.platform import ChannelCore
from lucidgate.channels.slack.events import events_router
from lucidgate.channels.slack.files import SlackFiles
from lucidgate.channels.slack.press import ACTION_ID, SECTION_CHARS, inbound_from_action, with_buttons
from lucidgate.channels.slack.format import SlackEvent, as_command, is_message_ts, parse_event, payload, split_plain, to_chunks
from lucidgate.channels.slack.sdk import classify, install_redaction, redact, sdk_logger
from lucidgate.channels.slack.settings import SlackSettings
from lucidgate.channels.slack.socket import SocketSupervisor
from lucidgate.channels.slack.stream import SlackPreviews
from lucidgate.config.errors import LucidError

if TYPE_CHECKING:
    from lucidgate.config.schema import SlackConfig

logger = logging.getLogger(__name__)

REACTION = "eyes"
_SEEN_KEEP = 5000


def preflight(section: SlackConfig) -> str | None:
    """Why this section cannot work in its mode (None when it can): checked before connecting."""
    if not section.bot_token.get_secret_value().strip():
        return "no botToken (set channels.slack.botToken)"
    if section.mode == "socket" and not section.app_token.get_secret_value().strip():
        return "socket mode needs an appToken (channels.slack.appToken)"
    if section.mode == "http" and not section.signing_secret.get_secret_value().strip():
        return "http mode needs a signingSecret (channels.slack.signingSecret)"
    return None


def _delivery_error(exc: Exception) -> DeliveryRetry | DeliveryFailed | None:
    """Slack's answer, as the outbox reads it (every message token-free)."""
    if isinstance(exc, SlackRequestError):  # the upload URL refused the bytes: try the file again
        return DeliveryRetry(redact(str(exc)))
    if isinstance(exc, SlackApiError):
        # Slack answered: anything but a rate limit or a 5xx (handled by the limiter) is a
        # refusal for good (channel_not_found, not_in_channel, invalid_blocks...).
        return DeliveryFailed(redact(str(exc)), permanent=True)
    if isinstance(exc, LucidError | aiohttp.ClientError):
        return DeliveryRetry(redact(f"{type(exc).__name__}: {exc}"))
    return None


class SlackChannel(ChannelCore):
    """The ``Channel`` for Slack; ``router()`` serves HTTP Events mode."""

    name = "slack"

    def __init__(self, settings: SlackSettings, bus: MessageBus, *, workspace: Path,
                 limiter: OutboundLimiter | None = None, gate: AccessGate | None = None,
                 pairing: PairingStore | None = None) -> None:
        reason = preflight(settings.access)
        if reason is not None:
            raise ChannelUnavailable(reason)
        super().__init__(settings, bus, workspace=workspace, gate=gate, pairing=pairing)
        self.cfg = cfg = settings.access
        self._bot_token = settings.bot_token
        self._api_base = settings.api_base
        api_timeout_s = settings.api_timeout_s
        install_redaction()
        self.limiter = limiter or OutboundLimiter("slack", classify, rate_per_s=10.0, burst=10)
        self._api_timeout_s = api_timeout_s
        self.web = AsyncWebClient(
            token=self._bot_token, base_url=self._api_base, timeout=int(max(1, api_timeout_s)),
            retry_handlers=[], logger=sdk_logger,  # retries are ours (limiter), not hidden
        )
        self.app = AsyncApp(
            client=self.web,
            signing_secret=cfg.signing_secret.get_secret_value(),
            request_verification_enabled=cfg.mode == "http",
            process_before_response=True,  # ack only after the bus has the message
            name="lucidgate",
            logger=sdk_logger,
        )
        self.app.event("message")(self._on_event)
        self.app.event("app_mention")(self._on_event)
        self.app.command("/lucid")(self._on_command)
        self.app.action(ACTION_ID)(self._on_press)
        self.app.event(re.compile(".*"))(self._on_other_event)  # ack, never "unhandled"
        self.socket = SocketSupervisor(
            self.app, settings.app_token, watchdog_s=cfg.watchdog_s,
            ping_interval_s=settings.ping_interval_s, backoff_s=settings.reconnect_backoff_s, logger=sdk_logger,
        ) if cfg.mode == "socket" else None
        self.previews = SlackPreviews(self.web, self.limiter, interval_s=cfg.preview_interval_s) \
            if cfg.streaming else None
        self.files = SlackFiles(bot_token=self._bot_token, api_base=self._api_base, workspace=self.workspace)
        self._seen_events: OrderedDict[str, None] = OrderedDict()
        self._inflight: dict[str, asyncio.Event] = {}
        self._reacted: set[tuple[str, str]] = set()

    # ----------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> SlackChannel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        try:
            timeout = aiohttp.ClientTimeout(total=self._api_timeout_s)
            self.web.session = aiohttp.ClientSession(timeout=timeout)
            self.files.start()
            if self.socket is not None:
                await self.socket.start()  # connects in the background; never fails on an outage
        except BaseException:
            await self.stop()
            raise
        self.bus.subscribe(self.name, self.send)
        logger.info("Slack channel started (%s mode)", self.cfg.mode)

    def describe(self) -> str:
        """The registry's one-line summary (never a token)."""
        return (f"{self.cfg.mode} mode via {self._api_base}, {len(self.cfg.allow_from)} allowed, "
                f"{len(self.cfg.owners)} owner(s), pairing {self.cfg.pairing}")

    async def stop(self) -> None:
        self.bus.unsubscribe(self.name)
        if self.socket is not None:
            await self.socket.stop()
        await self.files.stop()
        session, self.web.session = self.web.session, None
        if session is not None:
            await session.close()

    # ----------------------------------------------------------------- HTTP events mode
    def router(self) -> APIRouter:
        """``POST /slack/events`` for HTTP mode (an empty router in Socket Mode)."""
        return events_router(self.app) if self.cfg.mode == "http" else APIRouter()

    # ----------------------------------------------------------------- inbound
    async def _on_event(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        context: AsyncBoltContext,
        request: AsyncBoltRequest,
    ) -> None:
        """Bolt acks when this returns normally; an exception means no ack (Slack retries)."""
        event_id = str(body.get("event_id") or "")
        # A retry while the first attempt still runs waits for it: acking the retry early
        # would let Slack forget an event the first attempt may yet fail to store.
        while event_id and (running := self._inflight.get(event_id)) is not None:
            await running.wait()
        if event_id in self._seen_events:
            retry = request.headers.get("x-slack-retry-num")
            logger.debug("Slack retry %s of event %s ignored", retry, event_id)
            return
        if event_id:
            self._inflight[event_id] = asyncio.Event()
        try:
            parsed = parse_event(event, context.bot_user_id)
            if parsed is not None:
                await self._accept(parsed, team_of(body))
            if event_id:
                self._seen_events[event_id] = None
                while len(self._seen_events) > _SEEN_KEEP:
                    self._seen_events.popitem(last=False)
        finally:
            if event_id:
                self._inflight.pop(event_id).set()

    async def _on_other_event(self, event: dict[str, Any]) -> None:
        logger.debug("ignoring Slack event %s", event.get("type"))

    async def _accept(self, parsed: SlackEvent, team: str | None = None) -> None:
        knock = AccessRequest(self.name, parsed.chat_id, parsed.sender_id, chat_type=parsed.chat_type)
        decision = await self.gate.admit(knock, reply=Target(self.name, parsed.chat_id, parsed.thread_id))
        if not decision.allowed:
            return
        text, media = parsed.text, []
        for file in parsed.files[:10]:
            line, path = await self.files.download(file, parsed.chat_id)
            text = f"{text}\n{line}" if text else line
            if path is not None:
                media.append(path)
        msg = InboundMessage(
            channel=self.name, chat_id=parsed.chat_id, sender_id=parsed.sender_id, text=text,
            chat_type=parsed.chat_type, thread_id=parsed.thread_id, media=tuple(media),
            message_id=parsed.ts, role=decision.role, account=team,
        )
        await self._publish(msg)

    async def _publish(self, msg: InboundMessage) -> None:
        try:
            if not await self.bus.publish_inbound(msg, timeout=2.0):
                logger.debug("duplicate Slack message %s dropped", msg.dedupe_id)
        except BusFull:
            # Not accepted: no ack, so Slack redelivers it in a moment.
            logger.warning("bus full: Slack message for %s not acked; Slack will retry", msg.session_key)
            raise

    async def _on_command(self, ack: Any, command: dict[str, Any]) -> None:
        """``/lucid <command>``: publish ``/<command>`` and ack (within Bolt's deadline)."""
        user, channel_id = str(command.get("user_id", "")), str(command.get("channel_id", ""))
        if not user or not channel_id:
            await ack()
            return
        private = channel_id.startswith("D") or command.get("channel_name") == "directmessage"
        knock = AccessRequest(self.name, channel_id, user, chat_type="private" if private else "group")
        decision = await self.gate.check(knock)
        if not decision.allowed:
            await ack(text=self.gate.refusal or "")  # Slack shows it to that user only
            return
        words = str(command.get("text") or "").strip().lstrip("/") or "help"
        await self._publish(InboundMessage(
            channel=self.name, chat_id=channel_id, sender_id=user, text=as_command(words) or f"/{words}",
            chat_type="private" if private else "group", role=decision.role, account=team_of(command),
        ))
        await ack()

    async def _on_press(self, ack: Any, body: dict[str, Any]) -> None:
        """A press of one of our buttons: its command, from the presser, then the ack."""
        msg = await inbound_from_action(body, self.gate)
        if msg is not None:
            msg = replace(msg, account=team_of(body))
            await self._publish(msg)  # BusFull: no ack, Slack tells the presser it failed
        await ack()

    # ----------------------------------------------------------------- outbound
    async def send(self, msg: OutboundMessage) -> None:
        target = msg.target
        if isinstance(msg, OutboundTyping):
            await self._react(target, add=True)
            return
        if isinstance(msg, OutboundProgress):
            if self.previews is not None:  # else replies are posted whole
                await self.previews.show(target, msg.text, msg.activity, self._post)
            return
        text = f":warning: {msg.text}" if isinstance(msg, OutboundError) else msg.text
        plain = isinstance(msg, OutboundText) and msg.plain  # a refusal: as written
        buttons = msg.buttons if isinstance(msg, OutboundText) else ()
        sendable: list[outfiles.OutFile] = []
        if isinstance(msg, OutboundText) and msg.files:
            sendable, problems = await asyncio.to_thread(outfiles.ready, self.file_roots, msg.files, msg.agent)
            text = outfiles.with_problems(text, problems)
        placeholder = self.previews.take(target) if self.previews is not None and not plain else None
        # plain text with buttons goes in a section block, which holds fewer characters
        chunks = (split_plain(text, SECTION_CHARS) if buttons else split_plain(text)) if plain else to_chunks(text)
        parts: list[str | outfiles.OutFile] = [*chunks, *sendable]

        async def send_one(i: int, part: str | outfiles.OutFile) -> None:
            if isinstance(part, outfiles.OutFile):
                await self._upload(target, part)
            elif i > 0 or placeholder is None or self.previews is None or \
                    not await self.previews.replace(target.chat_id, placeholder, part):
                last = buttons if i == len(chunks) - 1 else ()
                await self._post(target.chat_id, part, target.thread_id, markdown=not plain, buttons=last)

        try:
            await send_parts(parts, send_one, skip=msg.skip_parts, failure=_delivery_error,
                             where=f"Slack channel {target.chat_id}")
        finally:
            await self._react(target, add=False)

    async def _post(self, channel: str, text: str, thread_ts: str | None, *,
                    markdown: bool = True, buttons: Sequence[tuple[str, str]] = ()) -> Any:
        """One message: Markdown in a ``markdown`` block, or (``markdown=False``) plain text,
        with ``buttons`` in an ``actions`` block under it."""
        fields = payload(text) if markdown else {"text": text, "mrkdwn": False}
        kwargs: dict[str, Any] = {"channel": channel, **with_buttons(fields, buttons)}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        return await self.limiter.run(channel, lambda: self.web.chat_postMessage(**kwargs),
                                      what="chat.postMessage")

    async def _upload(self, target: Target, file: outfiles.OutFile) -> Any:
        """One file with ``files_upload_v2`` into the chat (and thread); bytes read off the loop."""
        data = await asyncio.to_thread(file.path.read_bytes)
        kwargs: dict[str, Any] = {"channel": target.chat_id, "filename": file.name, "content": data,
                                  "title": file.name}
        if target.thread_id:
            kwargs["thread_ts"] = target.thread_id
        return await self.limiter.run(target.chat_id, lambda: self.web.files_upload_v2(**kwargs),
                                      what="files.uploadV2")

    async def _react(self, target: Target, *, add: bool) -> None:
        ts = target.reply_to
        if ts is None or not is_message_ts(ts):
            return
        key = (target.chat_id, str(ts))
        if add == (key in self._reacted):
            return
        call = self.web.reactions_add if add else self.web.reactions_remove
        try:
            await self.limiter.run(
                target.chat_id, lambda: call(channel=target.chat_id, name=REACTION, timestamp=ts),
                what="reactions.add" if add else "reactions.remove",
            )
        except (LucidError, SlackApiError, aiohttp.ClientError) as exc:
            logger.debug("Slack reaction change failed: %s", redact(str(exc)))
        if add:
            self._reacted.add(key)
        else:
            self._reacted.discard(key)


def team_of(payload: dict[str, Any]) -> str | None:
    """The Slack workspace (team id, ``T…``) a payload came from: ``InboundMessage.account``,
    what a binding's ``account`` names. Events and slash commands carry ``team_id``; a
    button press carries ``team.id`` (or its user's ``team_id``)."""
    team, user = payload.get("team"), payload.get("user")
    found = (payload.get("team_id")
             or (team.get("id") if isinstance(team, dict) else None)
             or (user.get("team_id") if isinstance(user, dict) else None))
    return str(found) if found else None
