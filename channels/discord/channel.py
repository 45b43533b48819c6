"""The Discord channel: discord.py's client for the Gateway and REST, our own intake.

Inbound: the Gateway delivers MESSAGE_CREATE; discord.py dispatches each as its own task, so
``on_message`` only queues the message (synchronously, in arrival order) and one intake task
handles them strictly in order: ignore bots, webhooks and (in guild channels) anything that
neither mentions the bot nor replies to it; ask the access gate; save attachments; publish
on the bus (journalled, deduplicated by ``discord:<channel>:<message id>``). A DM, a guild
channel and a thread are each their own chat (``discord:<channel_id>``).
A press of one of our buttons (INTERACTION_CREATE) is acknowledged at once and published as
the command it carries, from the presser (``press``).

Reconnects are discord.py's: a dropped socket or a missed heartbeat ACK is answered with a
RESUME, and Discord replays what was sent meanwhile; a replay the bus has already seen is
dropped by the dedupe id, so nothing is lost or handled twice. A new session (a restart)
gets no replay, so ``channels.discord.catchup`` fetches what each known chat missed.

Outbound: ``channels.discord.send`` behind the bus's durable outbox and one
``OutboundLimiter``. The REST root and Gateway URL are injectable (``channels.discord.sdk``),
so tests run the real discord.py against a loopback stand-in.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import aiohttp
import discord

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.discord.catchup import CatchUp
from lucidgate.channels.discord.files import save_attachments
from lucidgate.channels.discord.format import strip_mention
from lucidgate.channels.discord.press import inbound_from_interaction, pressed_command
from lucidgate.channels.discord.sdk import Endpoints, log_targets, make_client
from lucidgate.channels.discord.settings import DiscordSettings
from lucidgate.channels.discord.send import DiscordSender, classify
from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.pairing import PairingStore
from lucidgate.channels.messages import ChatType, InboundMessage, Target
from lucidgate.channels.platform import PlatformChannel
from lucidgate.config.errors import ConfigError

logger = logging.getLogger(__name__)

NAME = "discord"
_TURN_TYPES = (discord.MessageType.default, discord.MessageType.reply)
# What may pass on a later attempt (Discord down, the network away); a 4xx at login is for good.
_TRANSIENT = (discord.HTTPException, discord.GatewayNotFound, aiohttp.ClientError, OSError, TimeoutError)


class DiscordChannel(PlatformChannel):
    name = NAME
    label = "Discord"
    settings: DiscordSettings
    sender: DiscordSender

    def __init__(self, settings: DiscordSettings, bus: MessageBus, *, workspace: Path,
                 limiter: OutboundLimiter | None = None, gate: AccessGate | None = None,
                 pairing: PairingStore | None = None) -> None:
        super().__init__(settings, bus, workspace=workspace, gate=gate, pairing=pairing, secrets=[settings.token])
        self._token = settings.token
        self.api_base = settings.api_base
        self.limiter = limiter or OutboundLimiter(NAME, classify, per_key_rate_per_s=1.0, per_key_burst=5)
        self._endpoints = Endpoints(self.api_base)
        self._heartbeat_timeout_s = settings.heartbeat_timeout_s
        self._connect_wait_s = settings.connect_wait_s
        self._client: discord.Client | None = None
        self.connected = asyncio.Event()  # the Gateway session is live (READY or RESUMED)
        self.resumes = 0  # sessions resumed after a dropped connection
        self.fatal: str | None = None  # why the Gateway gave up for good (bad intents, token…)
        # (message, is a DM) — None: tell from the message; caught-up messages come with a flag
        self._intake: asyncio.Queue[tuple[discord.Message, bool | None]] = asyncio.Queue()
        self.catchup = CatchUp(self.workspace / "state" / "discord.json")
        self.sender = DiscordSender(lambda: self.client, self.limiter, workspace=self.file_roots,
                                    streaming=settings.streaming, preview_interval_s=settings.preview_interval_s,
                                    typing_refresh_s=settings.typing_refresh_s, typing_max_s=settings.typing_max_s)

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def client(self) -> discord.Client:
        if self._client is None:
            raise RuntimeError("the Discord channel is not started")
        return self._client

    @property
    def bot_id(self) -> str | None:
        user = self._client.user if self._client is not None else None
        return str(user.id) if user is not None else None

    def describe(self) -> str:
        """The registry's one-line summary (never the token)."""
        access = self.settings.access
        return f"gateway via {self.api_base}, {len(access.allow_from)} allowed, pairing {access.pairing}"

    async def start(self) -> None:
        if not self._token:
            raise ConfigError("channels.discord.token is empty: set it (or LUCIDGATE_CHANNELS__DISCORD__TOKEN)")
        self._stopping, self.fatal = False, None
        self._redactor.install(log_targets())
        self._endpoints.apply()
        self._client = make_client(heartbeat_timeout_s=self._heartbeat_timeout_s)
        self._client.on_message = self._on_message  # type: ignore[attr-defined]
        self._client.on_interaction = self._on_interaction  # type: ignore[attr-defined]
        self._client.on_ready = self._on_session  # type: ignore[attr-defined]
        self._client.on_resumed = self._on_resumed  # type: ignore[attr-defined]
        self._client.on_disconnect = self._on_disconnect  # type: ignore[attr-defined]
        await self.catchup.load()
        self.bus.subscribe(NAME, self.send)
        self._spawn("intake", self._intake_loop())
        try:
            await self._login()
        except discord.LoginFailure:
            await self.stop()
            raise ConfigError("Discord rejected channels.discord.token; check the bot token") from None
        except _TRANSIENT as exc:
            if isinstance(exc, discord.HTTPException) and 400 <= exc.status < 500 and exc.status != 429:
                await self.stop()
                raise ConfigError(f"Discord's REST API at {self.api_base} answered {exc.status} at login: "
                                  "check channels.discord.apiBase") from None
            logger.warning("Discord is unreachable at start (%s); will keep trying",
                           self._redact(f"{type(exc).__name__}: {exc}"))
            self._spawn("gateway", self._keep_connecting(self._login, self._run_gateway,
                                                         refused=(discord.LoginFailure,), transient=_TRANSIENT))
            return
        self._spawn("gateway", self._run_gateway())
        await self._first_session()

    async def _first_session(self) -> None:
        """Wait (a while) for the first session, so a refusal for good — the Message Content
        intent off, a revoked token — fails the start with its reason instead of passing."""
        gateway = self._tasks["gateway"]
        session = asyncio.ensure_future(self.connected.wait())
        try:
            await asyncio.wait({gateway, session}, timeout=self._connect_wait_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            session.cancel()
        if gateway.done() and self.fatal:
            reason = self.fatal
            await self.stop()
            raise ConfigError(reason)

    async def _login(self) -> None:
        """REST login (``GET /users/@me``, the application) and the Gateway URL to connect to;
        a failed attempt closes its HTTP session so a retry starts clean."""
        client = self.client
        try:
            await client.login(self._token)
            url = self.settings.gateway_url
            if not url:
                _, url, _ = await client.http.get_bot_gateway()
        except BaseException:
            await client.http.close()
            raise
        self._endpoints.use_gateway(url)
        self._ready.set()
        logger.info("Discord channel logged in as %s; gateway %s", client.user, url)

    async def _run_gateway(self) -> None:
        """discord.py's connect loop (it reconnects and resumes by itself); only what it
        gives up on ends up here, logged with what to fix."""
        try:
            await self.client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            self.fatal = ("Discord refused the Message Content intent: enable it for the bot in the Developer "
                          "Portal (Bot → Privileged Gateway Intents)")
        except discord.ConnectionClosed as exc:
            self.fatal = f"Discord closed the gateway (code {exc.code})"
        except Exception as exc:
            logger.exception("the Discord gateway connection failed")
            self.fatal = f"the Discord gateway connection failed ({type(exc).__name__})"
        finally:
            self.connected.clear()
        if self.fatal:
            logger.error("%s; the channel is offline", self.fatal)

    async def _close(self) -> None:
        client, self._client = self._client, None
        try:
            if client is not None:
                await client.close()
        finally:
            self.connected.clear()
            self._endpoints.restore()
            self._redactor.uninstall(log_targets())

    # -- gateway events ------------------------------------------------------------------
    async def _on_session(self) -> None:
        """A new session (not a resume): nothing sent before it will be replayed, so catch up."""
        self.connected.set()
        self._spawn("catchup", self._catch_up())

    async def _catch_up(self) -> None:
        count = 0
        async for message, private in self.catchup.missed(self.client):
            self._intake.put_nowait((message, private))
            count += 1
        if count:
            logger.info("Discord: catching up on %d message(s) sent while the gateway was away", count)

    async def _on_resumed(self) -> None:
        self.resumes += 1
        self.connected.set()

    async def _on_disconnect(self) -> None:
        self.connected.clear()

    async def _on_message(self, message: discord.Message) -> None:
        # No await before the put: dispatch order is arrival order, and so is the queue's.
        self._intake.put_nowait((message, None))

    async def _on_interaction(self, interaction: discord.Interaction) -> None:
        """A button press: acknowledged at once (Discord allows 3 s), then the presser's command."""
        if pressed_command(interaction) is None:
            return
        try:
            await interaction.response.defer()
        except discord.HTTPException as exc:  # expired or answered: the press still counts once
            logger.debug("could not acknowledge Discord interaction %s: %s", interaction.id, exc)
        inbound = await inbound_from_interaction(interaction, self.gate)
        if inbound is not None:
            inbound = replace(inbound, account=self.bot_id)  # the bot, for bindings' ``account``
        if inbound is not None and not await self.bus.publish_inbound(inbound):
            logger.info("duplicate Discord press %s ignored", interaction.id)

    async def _intake_loop(self) -> None:
        while True:
            message, private = await self._intake.get()
            if private is None:
                private = isinstance(message.channel, discord.DMChannel)
            try:
                await self.handle_message(message, private=private)
                await self.catchup.note(str(message.channel.id), message.id, private)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("could not handle Discord message %s in channel %s",
                                 message.id, message.channel.id)

    # -- inbound -------------------------------------------------------------------------
    async def handle_message(self, message: discord.Message, *, private: bool) -> None:
        """Turn one message into at most one ``InboundMessage``; the gate answers strangers.
        ``private``: the message is in a DM (every message is a turn there)."""
        author = message.author
        if author.bot or message.webhook_id is not None or message.type not in _TURN_TYPES:
            return
        bot_id = self.bot_id
        if not private and not self._addressed(message, bot_id):
            return
        sender_id, chat_id = str(author.id), str(message.channel.id)
        chat_type: ChatType = "private" if private else "group"
        knock = AccessRequest(NAME, chat_id, sender_id, author.name, chat_type)
        decision = await self.gate.admit(knock, reply=Target(NAME, chat_id, None, str(message.id)))
        if not decision.allowed:
            return
        text = strip_mention(message.content, bot_id)
        notes, media = await save_attachments(list(message.attachments), chat_id, self.workspace)
        full = "\n".join([*notes, text] if text else notes)
        if not full.strip():
            return
        inbound = InboundMessage(channel=NAME, chat_id=chat_id, sender_id=sender_id, text=full,
                                 chat_type=chat_type, media=tuple(media), message_id=str(message.id),
                                 sender_name=author.display_name, role=decision.role, account=bot_id)
        if not await self.bus.publish_inbound(inbound):
            logger.info("duplicate Discord message %s in channel %s ignored", message.id, chat_id)

    @staticmethod
    def _addressed(message: discord.Message, bot_id: str | None) -> bool:
        """In a guild channel or thread: the bot is @mentioned, or the message replies to it."""
        if bot_id is None:
            return False
        if any(str(user.id) == bot_id for user in message.mentions):
            return True
        ref = message.reference
        resolved = ref.resolved if ref is not None else None
        return isinstance(resolved, discord.Message) and str(resolved.author.id) == bot_id
