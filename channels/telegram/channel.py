"""The Telegram channel: python-telegram-bot's ``Application`` for the Bot API, our own intake.

PTB provides the bot (HTTP client, typed objects, ``base_url`` injection so tests and
self-hosted Bot API servers work); intake is ours, because durability needs an ordering
PTB's ``Updater`` does not give: an update is journalled by ``bus.publish_inbound`` *before*
the next ``getUpdates`` offset acknowledges it, and the last acknowledged ``update_id`` is
persisted (``state/telegram.json``) so a restart resumes exactly there. A redelivered
message is still caught by the bus's dedupe id (``telegram:<chat>:<message_id>``).

Intake is long polling (``channels.telegram.poll``: backoff, one log line per incident and a
liveness watchdog) or, when ``webhook.url`` is set, a FastAPI route checked against the
secret-token header (``channels.telegram.webhook``).
Outbound messages go through one ``OutboundLimiter`` (flood limits, ``retry_after``, no
blind resend of a timed-out send) and are delivered by ``channels.telegram.send``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from telegram import BotCommand, Message, Update
from telegram.error import BadRequest, InvalidToken, TelegramError
from telegram.ext import Application, ApplicationBuilder

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.base import CommandSpec
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.pairing import PairingStore
from lucidgate.channels.messages import InboundMessage, Target
from lucidgate.channels.platform import PlatformChannel
from lucidgate.channels.telegram.format import clean_text, is_addressed, media_items, menu_commands, safe_name
from lucidgate.channels.telegram.poll import TelegramPoller
from lucidgate.channels.telegram.press import inbound_from_press
from lucidgate.channels.telegram.send import TelegramSender, classify
from lucidgate.channels.telegram.settings import DEFAULT_API_BASE, TelegramSettings
from lucidgate.channels.telegram.webhook import webhook_router
from lucidgate.config.errors import ConfigError
from lucidgate.config.fileio import atomic_write_bytes
from lucidgate.config.redact import logger_family

logger = logging.getLogger(__name__)

NAME = "telegram"
ALLOWED_UPDATES = ["message", "callback_query"]  # messages, and presses of our buttons
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024


# -- logging ---------------------------------------------------------------------------
def _log_targets() -> list[logging.Filterer]:
    """The root handlers (every propagated record) and the HTTP/PTB loggers: both log the token."""
    return [*logging.getLogger().handlers, *logger_family("httpx", "httpcore", "telegram")]


class TelegramChannel(PlatformChannel):
    name = NAME
    label = "Telegram"
    settings: TelegramSettings
    sender: TelegramSender

    def __init__(self, settings: TelegramSettings, bus: MessageBus, *, workspace: Path,
                 commands: Sequence[CommandSpec] = (), limiter: OutboundLimiter | None = None,
                 gate: AccessGate | None = None, pairing: PairingStore | None = None) -> None:
        super().__init__(settings, bus, workspace=workspace, gate=gate, pairing=pairing,
                         secrets=[settings.token, settings.webhook_secret])
        self._token = settings.token
        self.api_base = settings.api_base
        self.limiter = limiter or OutboundLimiter(NAME, classify)
        self._webhook_url = settings.webhook_url
        self._webhook_secret = settings.webhook_secret
        self._request_timeout_s = settings.request_timeout_s
        self._menu = menu_commands(commands)
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self.sender = TelegramSender(
            lambda: self.bot, self.limiter, streaming=settings.streaming, workspace=self.file_roots,
            preview_interval_s=settings.preview_interval_s,
            typing_refresh_s=settings.typing_refresh_s, typing_max_s=settings.typing_max_s,
        )
        self._in_bus = False
        self._poller = TelegramPoller(
            lambda: self.bot, self.handle_update, spawn=self._spawn, in_backpressure=lambda: self._in_bus,
            redact=self._redactor.redact, state_path=self.workspace / "state" / "telegram.json",
            settings=settings, allowed_updates=ALLOWED_UPDATES,
        )

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def bot(self) -> Any:
        if self._app is None:
            raise RuntimeError("the Telegram channel is not started")
        return self._app.bot

    @property
    def last_update_id(self) -> int | None:
        """The last ``update_id`` polled and persisted (``None`` before the first one)."""
        return self._poller.last_update_id

    @property
    def poll_restarts(self) -> int:
        """How often the watchdog restarted a stuck poll."""
        return self._poller.poll_restarts

    @property
    def username(self) -> str:
        return str(self.bot.username or "")

    @property
    def account(self) -> str | None:
        """The bot a message arrived on, for bindings' ``account``: its username without the @."""
        return self.username or None

    def describe(self) -> str:
        """The registry's one-line summary (never the token)."""
        mode = f"webhook {self._webhook_url}" if self._webhook_url else "long polling"
        access = self.settings.access
        return f"{mode} via {self.api_base}, {len(access.allow_from)} allowed, pairing {access.pairing}"

    async def start(self) -> None:
        if not self._token:
            raise ConfigError(
                "channels.telegram.token is empty: set it (or LUCIDGATE_CHANNELS__TELEGRAM__TOKEN)"
            )
        self._stopping = False
        self._redactor.install(_log_targets())
        timeout = self._request_timeout_s
        self._app = (
            ApplicationBuilder()
            .token(self._token)
            .base_url(f"{self.api_base}/bot")
            .base_file_url(f"{self.api_base}/file/bot")
            .updater(None)
            .job_queue(None)
            .read_timeout(timeout)
            .write_timeout(timeout)
            .connect_timeout(timeout)
            .get_updates_read_timeout(timeout)
            .build()
        )
        self._redactor.install(_log_targets())  # PTB created the bot's loggers just now
        await self._poller.load_state()
        self.bus.subscribe(NAME, self.send)
        try:
            await self._connect()
        except InvalidToken:
            await self.stop()
            raise ConfigError("Telegram rejected channels.telegram.token; check the bot token") from None
        except BadRequest as exc:  # e.g. a webhook url or secret Telegram will not accept
            await self.stop()
            reason = self._redact(str(exc))
            raise ConfigError(f"Telegram refused the channel setup: {reason}") from None
        except TelegramError as exc:
            reason = self._redact(str(exc))
            logger.warning("Telegram is unreachable at start (%s); will keep trying", reason)
            self._spawn("connect", self._keep_connecting(
                self._connect, self._run_intake, refused=(InvalidToken, BadRequest), transient=(TelegramError,)))
            return
        await self._run_intake()

    async def _connect(self) -> None:
        """getMe, the command menu, and the webhook (set, or deleted for polling)."""
        assert self._app is not None
        await self._app.initialize()
        if self._menu:
            try:
                await self.bot.set_my_commands([BotCommand(c, d) for c, d in self._menu])
            except TelegramError as exc:
                logger.warning("could not register the Telegram command menu: %s", exc)
        if self._webhook_url:
            await self.bot.set_webhook(
                self._webhook_url, secret_token=self._webhook_secret, allowed_updates=ALLOWED_UPDATES
            )
        else:
            await self.bot.delete_webhook(drop_pending_updates=False)
        self._ready.set()
        mode = "webhook" if self._webhook_url else "polling"
        logger.info("Telegram channel ready as @%s (%s)", self.username, mode)

    async def _run_intake(self) -> None:
        if not self._webhook_url:
            self._poller.start()

    async def _close(self) -> None:
        app, self._app = self._app, None
        try:
            if app is not None:
                await app.shutdown()
                await app.bot.shutdown()  # closes the HTTP clients even if initialize() failed
        finally:
            self._redactor.uninstall(_log_targets())

    # -- webhook -------------------------------------------------------------------------
    def router(self) -> APIRouter:
        """``POST /telegram/webhook`` (only in webhook mode; otherwise an empty router)."""
        if not self._webhook_url:
            return APIRouter()
        return webhook_router(secret=self._webhook_secret, bot=lambda: self.bot, handle_update=self.handle_update,
                              ready=lambda: self._ready.is_set() and not self._stopping)

    # -- inbound -------------------------------------------------------------------------
    async def handle_update(self, update: Update) -> None:
        """Turn one update into at most one ``InboundMessage``; the gate answers strangers."""
        if update.callback_query is not None:
            await self._handle_press(update)
            return
        msg = update.message
        if msg is None or msg.from_user is None or msg.from_user.is_bot:
            return
        chat_type = msg.chat.type
        if chat_type not in ("private", "group", "supergroup"):
            return
        is_group = chat_type != "private"
        text = msg.text or msg.caption or ""
        entities = msg.parse_entities() if msg.text else msg.parse_caption_entities()
        if is_group and not is_addressed(msg, entities, self.bot.id, self.username):
            return
        sender = msg.from_user
        sender_id, chat_id = str(sender.id), str(msg.chat.id)
        knock = AccessRequest(NAME, chat_id, sender_id, sender.username, "group" if is_group else "private")
        decision = await self.gate.admit(knock, reply=Target(NAME, chat_id, None, str(msg.message_id)))
        if not decision.allowed:
            return
        text = clean_text(text, self.username)
        notes, media = await self._download_media(msg, chat_id)
        full = "\n".join([*notes, text] if text else notes)
        if not full.strip():
            return
        inbound = InboundMessage(
            channel=NAME,
            chat_id=chat_id,
            sender_id=sender_id,
            text=full,
            chat_type="group" if is_group else "private",
            thread_id=str(msg.message_thread_id) if msg.is_topic_message and msg.message_thread_id else None,
            media=tuple(media),
            message_id=str(msg.message_id),
            sender_name=sender.full_name or sender.username,
            role=decision.role,
            account=self.account,
        )
        self._in_bus = True
        try:
            accepted = await self.bus.publish_inbound(inbound)
        finally:
            self._in_bus = False
        if not accepted:
            logger.info("duplicate Telegram message %s in chat %s ignored", inbound.message_id, chat_id)

    async def _handle_press(self, update: Update) -> None:
        query = update.callback_query
        if query is None:
            return
        inbound = await inbound_from_press(query, self.gate, account=self.account)
        if inbound is not None:
            self._in_bus = True
            try:
                await self.bus.publish_inbound(inbound)
            finally:
                self._in_bus = False
        try:  # stop the button's spinner; the answer itself arrives as a message
            await self.bot.answer_callback_query(query.id)
        except TelegramError as exc:
            logger.info("Telegram: could not acknowledge a button press (%s)", exc)

    async def _download_media(self, msg: Message, chat_id: str) -> tuple[list[str], list[str]]:
        """Save photos, voice notes, audio, video and documents; return (text notes, paths)."""
        notes: list[str] = []
        paths: list[str] = []
        for label, item, ext in media_items(msg):
            size = getattr(item, "file_size", None) or 0
            if size > MAX_DOWNLOAD_BYTES:
                notes.append(f"[{label} not downloaded: {size / 1e6:.1f} MB is over the 20 MB limit]")
                continue
            rel = Path("media", NAME, safe_name(chat_id), safe_name(item.file_unique_id) + ext)
            try:
                file = await self.bot.get_file(item.file_id)
                if (file.file_size or 0) > MAX_DOWNLOAD_BYTES:
                    raise ValueError("over the 20 MB limit")
                data = await file.download_as_bytearray()
                if len(data) > MAX_DOWNLOAD_BYTES:
                    raise ValueError("over the 20 MB limit")
                await asyncio.to_thread(atomic_write_bytes, self.workspace / rel, bytes(data))
            except (TelegramError, ValueError, RuntimeError, OSError) as exc:
                logger.warning("could not download a %s from chat %s: %s", label, chat_id, exc)
                notes.append(f"[{label} could not be downloaded]")
                continue
            paths.append(rel.as_posix())
            notes.append(f"[{label}: {rel.as_posix()}]")
        return notes, paths
