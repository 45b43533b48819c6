"""The Matrix channel: matrix-nio's ``AsyncClient`` for the client-server API, our own intake.

nio provides the HTTP client, typed responses and the room state a sync builds (members,
encryption); intake is ours, because durability needs the ordering nio's ``sync_forever``
does not give: each batch is journalled on the bus *before* its sync token is persisted
(``channels.matrix.sync``). A redelivered event is still caught by the bus's dedupe id
(``matrix:<room>:<event_id>``).

Per batch: invites from allowed senders (or, with pairing on, anyone who may ask for a code)
are joined, others declined; each timeline message (``channels.matrix.events``) is checked
by the one access gate and published — every message in a direct chat, in other rooms only
those that mention the bot. Attachments are saved to ``media/matrix/<room>/``.

End-to-end encryption is not supported (nio's E2EE needs its crypto store and key sharing
done right, and a half-done version leaks or loses messages). An encrypted room is told so
once (``encryptedRoomNotice``), logged, and listed by ``lucid doctor``; nothing else is ever
sent there.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nio import AsyncClient, AsyncClientConfig, MatrixRoom, SyncResponse

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.pairing import PairingStore
from lucidgate.channels.matrix.calls import MatrixCallError, checked, classify
from lucidgate.channels.matrix.events import Parsed, file_name, parse_message, safe_component
from lucidgate.channels.matrix.login import sign_in
from lucidgate.channels.matrix.rooms import RoomKinds, decide, rooms_path
from lucidgate.channels.matrix.send import MatrixSender
from lucidgate.channels.matrix.state import load_state, state_path
from lucidgate.channels.matrix.sync import MatrixSyncer
from lucidgate.channels.messages import ChatType, InboundMessage, Target
from lucidgate.channels.platform import PlatformChannel
from lucidgate.config.errors import ConfigError, LucidError
from lucidgate.config.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from lucidgate.channels.matrix.settings import MatrixSettings

logger = logging.getLogger(__name__)

NAME = "matrix"
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024


class MatrixChannel(PlatformChannel):
    name = NAME
    label = "Matrix"
    settings: MatrixSettings
    sender: MatrixSender

    def __init__(self, settings: MatrixSettings, bus: MessageBus, *, workspace: Path,
                 limiter: OutboundLimiter | None = None, gate: AccessGate | None = None,
                 pairing: PairingStore | None = None) -> None:
        super().__init__(settings, bus, workspace=workspace, gate=gate, pairing=pairing,
                         secrets=[settings.access_token, settings.password])
        self.homeserver = settings.homeserver
        self.limiter = limiter or OutboundLimiter(NAME, classify, rate_per_s=10.0, burst=10)
        self._state_path = state_path(self.workspace)
        self._client: AsyncClient | None = None
        self._seen_rooms: set[str] = set()
        self.state = load_state(self._state_path, self.homeserver, settings.user_id)
        self.rooms = RoomKinds(rooms_path(self.workspace))
        self.sender = MatrixSender(lambda: self.client, self.limiter, msgtype=settings.msgtype,
                                   streaming=settings.streaming, is_encrypted=self.is_encrypted,
                                   workspace=self.file_roots, preview_interval_s=settings.preview_interval_s,
                                   typing_refresh_s=settings.typing_refresh_s, typing_max_s=settings.typing_max_s)
        self.syncer = MatrixSyncer(lambda: self.client, self.handle_sync, state=self.state,
                                   state_path=self._state_path, timeout_s=settings.sync_timeout_s,
                                   retry_base_s=settings.retry_base_s, retry_max_s=settings.retry_max_s)

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise RuntimeError("the Matrix channel is not started")
        return self._client

    @property
    def user_id(self) -> str:
        return self.client.user_id

    def describe(self) -> str:
        """The registry's one-line summary (never a credential)."""
        s = self.settings
        how = "access token" if s.access_token else "password login"
        return (f"{s.user_id or 'bot'} on {self.homeserver} ({how}), "
                f"{len(s.access.allow_from)} allowed, pairing {s.access.pairing}, encryption not supported")

    def is_encrypted(self, room_id: str) -> bool:
        room = self._client.rooms.get(room_id) if self._client is not None else None
        return bool(room is not None and room.encrypted)

    async def start(self) -> None:
        self._stopping = False
        config = AsyncClientConfig(max_limit_exceeded=0, max_timeouts=0,
                                   request_timeout=self.settings.request_timeout_s)
        self._client = AsyncClient(self.homeserver, self.settings.user_id, config=config)
        self.bus.subscribe(NAME, self.send)
        try:
            await self._connect()
        except ConfigError:
            await self.stop()
            raise
        except (MatrixCallError, OSError, asyncio.TimeoutError, LucidError) as exc:
            logger.warning("the Matrix homeserver is unreachable at start (%s); will keep trying",
                           self._redact(str(exc)))
            self._spawn("connect", self._keep_connecting(self._connect, self._run_sync, refused=(ConfigError,),
                                                         transient=(MatrixCallError,)))
            return
        await self._run_sync()

    async def _connect(self) -> None:
        try:
            fresh = await sign_in(self.client, self.state, access_token=self.settings.access_token,
                                  password=self.settings.password, device_name=self.settings.device_name)
        except Exception as exc:
            if isinstance(exc, ConfigError | MatrixCallError):
                raise
            raise MatrixCallError("connect", None, None, f"{type(exc).__name__}: {exc}") from exc
        self.state.user_id = self.client.user_id
        if fresh:
            await self.syncer.save()
        self._ready.set()
        logger.info("Matrix channel ready as %s on %s", self.client.user_id, self.homeserver)

    async def _run_sync(self) -> None:
        self._spawn("sync", self.syncer.run())

    async def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # -- inbound -------------------------------------------------------------------------
    async def handle_sync(self, response: SyncResponse, catch_up: bool) -> None:
        """One sync batch: invites first, then each joined room's new messages in order."""
        for room_id, info in response.rooms.invite.items():
            await self._on_invite(room_id, info.invite_state)
        skipped = 0
        for room_id, info in response.rooms.join.items():
            room = self.client.rooms.get(room_id)
            if room is None:
                continue
            # Before any message of the batch: a third person's member event (even one who
            # already left again) makes a private room shared for good.
            if self.rooms.third_party(room_id, _member_keys([*info.state, *info.timeline.events]),
                                      self.client.user_id):
                await self.rooms.save()
            if room.encrypted:
                await self._refuse_encrypted(room_id)
                continue
            if info.timeline.limited and not catch_up and room_id in self._seen_rooms:
                logger.warning("Matrix room %s had more new events than one sync returns; "
                               "the oldest were not seen", room_id)
            self._seen_rooms.add(room_id)
            for event in info.timeline.events:
                source = getattr(event, "source", None)
                if not isinstance(source, dict):
                    continue
                if catch_up:
                    skipped += source.get("type") == "m.room.message"
                    continue
                await self.handle_event(room, source)
        if skipped:
            logger.info("Matrix: first sync of this account; %d earlier message(s) not answered", skipped)

    async def _on_invite(self, room_id: str, invite_state: list[Any]) -> None:
        me = self.client.user_id
        inviter, direct = None, False
        for event in invite_state:
            source = getattr(event, "source", {}) or {}
            if source.get("type") == "m.room.member" and source.get("state_key") == me:
                inviter = source.get("sender")
                direct = bool((source.get("content") or {}).get("is_direct"))
        if not isinstance(inviter, str):
            return
        chat_type: ChatType = "private" if direct else "group"
        decision = await self.gate.check(AccessRequest(NAME, room_id, inviter, inviter, chat_type))
        accept = decision.allowed or decision.outcome == "pairing"
        if accept and direct:
            self.rooms.note_direct_invite(room_id, inviter)  # one fact of a private room
            await self.rooms.save()
        what = "join" if accept else "leave"
        try:
            call = (lambda: self.client.join(room_id)) if accept else (lambda: self.client.room_leave(room_id))
            await self.limiter.run(room_id, lambda: checked(what, call), what=what)
        except (MatrixCallError, LucidError) as exc:
            logger.warning("Matrix: could not %s room %s: %s", what, room_id, exc)
            return
        logger.info("Matrix: %s the invite from %s to room %s", "accepted" if accept else "declined",
                    inviter, room_id)

    async def _refuse_encrypted(self, room_id: str) -> None:
        if room_id in self.state.encrypted_notified:
            return
        logger.warning("Matrix room %s is end-to-end encrypted: not supported, the bot will not "
                       "read or answer there", room_id)
        await self.sender.send_notice(room_id, self.settings.encrypted_room_notice)
        self.state.encrypted_notified.append(room_id)
        await self.syncer.save()

    async def handle_event(self, room: MatrixRoom, source: dict[str, Any]) -> None:
        """Turn one timeline event into at most one ``InboundMessage``; the gate answers strangers."""
        me = self.client.user_id
        parsed = parse_message(source, bot_id=me, bot_name=room.user_name(me))
        if parsed is None:
            return
        private = await self._is_private(room, parsed.sender)
        if not private and not parsed.mentioned:
            return
        chat_type: ChatType = "private" if private else "group"
        # The id doubles as the "username": the gate reads allowFrom entries that start with "@"
        # as usernames (Telegram's), and every Matrix id starts with "@".
        knock = AccessRequest(NAME, room.room_id, parsed.sender, parsed.sender, chat_type)
        decision = await self.gate.admit(knock, reply=Target(NAME, room.room_id, None, parsed.event_id))
        if not decision.allowed:
            return
        notes, media = await self._download(room.room_id, parsed)
        text = "\n".join([*notes, parsed.text] if parsed.text else notes)
        if not text.strip():
            return
        inbound = InboundMessage(channel=NAME, chat_id=room.room_id, sender_id=parsed.sender, text=text,
                                 chat_type=chat_type, media=tuple(media), message_id=parsed.event_id,
                                 sender_name=room.user_name(parsed.sender), role=decision.role,
                                 account=self.client.user_id or None)
        if not await self.bus.publish_inbound(inbound):
            logger.info("duplicate Matrix event %s in room %s ignored", parsed.event_id, room.room_id)

    async def _is_private(self, room: MatrixRoom, sender: str) -> bool:
        """The room's kind (``channels.matrix.rooms``): decided from its full state the first
        time, then kept; a message from a third person makes a private room shared."""
        me = self.client.user_id
        kind = self.rooms.kind(room.room_id)
        if kind is None:
            try:
                response = await checked("room state", lambda: self.client.room_get_state(room.room_id))
            except (MatrixCallError, LucidError, OSError, asyncio.TimeoutError) as exc:
                logger.warning("Matrix: could not read the state of room %s (%s); treated as shared "
                               "for now", room.room_id, exc)
                return False
            events = [e for e in getattr(response, "events", []) if isinstance(e, dict)]
            kind, partner = decide(events, bot=me, direct_from=self.rooms.direct_invites.get(room.room_id))
            self.rooms.settle(room.room_id, kind, partner)
            await self.rooms.save()
        if kind == "private" and self.rooms.third_party(
                room.room_id, [sender, *room.users, *room.invited_users], me):
            await self.rooms.save()
            return False
        return kind == "private"

    async def _download(self, room_id: str, parsed: Parsed) -> tuple[list[str], list[str]]:
        """Save the message's attachment; return (text notes, workspace-relative paths)."""
        item = parsed.attachment
        if item is None:
            return [], []
        if item.size is not None and item.size > MAX_DOWNLOAD_BYTES:
            return [f"[{item.label} not downloaded: {item.size / 1e6:.1f} MB is over the 20 MB limit]"], []
        rel = Path("media", NAME, safe_component(room_id), file_name(parsed.event_id, item))
        try:
            response = await checked("download", lambda: self.client.download(item.url))
            body = getattr(response, "body", None)
            if not isinstance(body, bytes) or len(body) > MAX_DOWNLOAD_BYTES:
                raise ValueError("no content, or over the 20 MB limit")
            await asyncio.to_thread(atomic_write_bytes, self.workspace / rel, body)
        except (MatrixCallError, LucidError, ValueError, OSError) as exc:
            logger.warning("could not download a %s from Matrix room %s: %s", item.label, room_id, exc)
            return [f"[{item.label} could not be downloaded: {item.name}]"], []
        return [f"[{item.label}: {rel.as_posix()} ({item.name})]"], [rel.as_posix()]

    # -- outbound ------------------------------------------------------------------------
    async def send_file(self, room_id: str, path: Path, *, caption: str | None = None) -> str:
        """Upload a workspace file to a room (media out); returns the event id."""
        return await self.sender.send_file(room_id, path, caption=caption)


def _member_keys(events: list[Any]) -> list[str]:
    """The users named by the ``m.room.member`` events among a sync's room events."""
    keys = []
    for event in events:
        source = getattr(event, "source", None)
        if isinstance(source, dict) and source.get("type") == "m.room.member" \
                and isinstance(source.get("state_key"), str):
            keys.append(source["state_key"])
    return keys
