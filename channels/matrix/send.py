"""Outbound delivery for the Matrix channel: replies, streaming edits, typing, files.

Every call goes through the channel's ``OutboundLimiter`` (pacing, 429 ``retry_after_ms``,
bounded retries; see ``channels.matrix.calls``). A reply's pieces are sent with transaction
ids derived from its outbox delivery id (``lucid-<id>-<n>``), so a retry after an outage or
a restart — even one after the homeserver had already accepted the piece — never posts it
twice: the homeserver answers a repeated transaction with the event it already made.

With streaming on, progress becomes one message per turn that is edited in place
(``m.replace``) at most once per interval; the final reply's first piece is the last edit.

Encrypted rooms are refused here too: nothing but the one fixed notice is ever sent into
a room the homeserver marks encrypted (the answer would go out unencrypted).
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nio import AsyncClient

from channels._ratelimit import DeliveryFailed, DeliveryRetry, OutboundLimiter
from channels.matrix.calls import MatrixCallError, checked
from channels.matrix.format import MAX_CHUNK_CHARS, edit_content, message_content, reply_to, split_markdown
from channels.messages import OutboundError, OutboundMessage, OutboundProgress, OutboundText, OutboundTyping, Target
from config.errors import LucidError

logger = logging.getLogger(__name__)

PREVIEW_MAX_CHARS = 4000
TYPING_TIMEOUT_MS = 30_000


@dataclass(slots=True)
class _Preview:
    event_id: str
    text: str
    sent_at: float


class MatrixSender:
    """Sends ``OutboundMessage``s with the client ``get_client()`` returns (it exists only
    while the channel runs; the sender and its preview state live as long as the channel)."""

    def __init__(self, get_client: Callable[[], AsyncClient], limiter: OutboundLimiter, *,
                 msgtype: str, streaming: bool, is_encrypted: Callable[[str], bool],
                 preview_interval_s: float = 1.0, typing_refresh_s: float = 25.0,
                 typing_max_s: float = 120.0) -> None:
        self._client = get_client
        self.limiter = limiter
        self._msgtype = f"m.{msgtype}"
        self._streaming = streaming
        self._is_encrypted = is_encrypted
        self._preview_interval_s = preview_interval_s
        self._typing_refresh_s, self._typing_max_s = typing_refresh_s, typing_max_s
        self._previews: dict[tuple[str, str | None], _Preview] = {}
        self._typing: dict[str, asyncio.Task[None]] = {}

    async def send(self, msg: OutboundMessage) -> None:
        room = msg.target.chat_id
        if isinstance(msg, OutboundTyping):
            if not self._is_encrypted(room):
                self._start_typing(room)
            return
        if isinstance(msg, OutboundProgress):
            if self._streaming and not self._is_encrypted(room):
                await self._preview(msg.target, msg.text or (f"_{msg.activity}_" if msg.activity else ""))
            return
        await self._stop_typing(room)
        if self._is_encrypted(room):
            raise DeliveryFailed(f"room {room} is end-to-end encrypted; lucidgate does not send there",
                                 permanent=True)
        await self._deliver(msg)

    # -- replies ---------------------------------------------------------------------------
    async def _deliver(self, msg: OutboundText | OutboundError) -> None:
        plain = isinstance(msg, OutboundText) and msg.plain
        msgtype = "m.notice" if plain or isinstance(msg, OutboundError) else self._msgtype
        pieces = split_markdown(msg.text, MAX_CHUNK_CHARS) if not plain else [msg.text]
        preview = None if plain else self._previews.pop(_key(msg.target), None)
        txn_base = f"lucid-{msg.delivery_id}" if msg.delivery_id else f"lucid-{uuid.uuid4().hex}"
        for i, piece in enumerate(pieces):
            if i < msg.skip_parts:
                continue
            content = message_content(piece, msgtype=msgtype, plain=plain)
            try:
                if i == 0 and preview is not None:
                    content = edit_content(preview.event_id, content)
                elif i == 0:
                    content = reply_to(content, msg.target.reply_to)
                await self.room_send(msg.target.chat_id, content, f"{txn_base}-{i}")
            except MatrixCallError as exc:
                if exc.transient:
                    after = exc.retry_after_ms / 1000 if exc.rate_limited and exc.retry_after_ms else None
                    raise DeliveryRetry(str(exc), after_s=after, parts_done=i) from exc
                logger.error("Matrix refused a reply to room %s (part %d of %d): %s",
                             msg.target.chat_id, i + 1, len(pieces), exc)
                raise DeliveryFailed(str(exc), permanent=True, parts_done=i) from exc
            except (DeliveryRetry, DeliveryFailed) as exc:
                exc.parts_done = i
                raise
            except LucidError as exc:
                raise DeliveryRetry(str(exc), parts_done=i) from exc

    async def room_send(self, room: str, content: dict[str, Any], txn_id: str | None = None) -> str:
        """One ``m.room.message`` through the limiter; returns the new event's id."""
        response = await self.limiter.run(
            room, lambda: checked("send", lambda: self._client().room_send(
                room, "m.room.message", content, tx_id=txn_id or uuid.uuid4().hex)),
            what="room send")
        return str(response.event_id)

    async def send_notice(self, room: str, text: str) -> None:
        """A fixed notice (the encrypted-room warning): best effort, never raises."""
        try:
            await self.room_send(room, {"msgtype": "m.notice", "body": text})
        except (LucidError, MatrixCallError) as exc:
            logger.warning("could not post a notice in Matrix room %s: %s", room, exc)

    # -- streaming -------------------------------------------------------------------------
    async def _preview(self, target: Target, text: str) -> None:
        text = text[:PREVIEW_MAX_CHARS]
        if not text.strip():
            return
        key, now = _key(target), time.monotonic()
        preview = self._previews.get(key)
        try:
            if preview is None:
                content = reply_to(message_content(text, msgtype=self._msgtype), target.reply_to)
                event_id = await self.room_send(target.chat_id, content)
                self._previews[key] = _Preview(event_id, text, now)
            elif now - preview.sent_at >= self._preview_interval_s and text != preview.text:
                preview.sent_at, preview.text = now, text
                new = message_content(text, msgtype=self._msgtype)
                await self.room_send(target.chat_id, edit_content(preview.event_id, new))
        except (LucidError, MatrixCallError) as exc:
            logger.debug("streaming preview update failed in room %s: %s", target.chat_id, exc)

    # -- typing ----------------------------------------------------------------------------
    def _start_typing(self, room: str) -> None:
        task = self._typing.get(room)
        if task is None or task.done():
            self._typing[room] = asyncio.create_task(self._typing_loop(room), name=f"matrix-typing-{room}")

    def typing_task(self, room: str) -> asyncio.Task[None] | None:
        return self._typing.get(room)

    async def _typing_loop(self, room: str) -> None:
        """Matrix shows "typing" for the timeout given: renew it until the reply (or a cap)."""
        deadline = time.monotonic() + self._typing_max_s
        while time.monotonic() < deadline:
            await self._typing_call(room, True)
            await asyncio.sleep(self._typing_refresh_s)

    async def _stop_typing(self, room: str) -> None:
        task = self._typing.pop(room, None)
        if task is not None and not task.done():
            task.cancel()
            await self._typing_call(room, False)

    async def _typing_call(self, room: str, on: bool) -> None:
        try:
            await self.limiter.run(None, lambda: checked("typing", lambda: self._client().room_typing(
                room, on, timeout=TYPING_TIMEOUT_MS)), what="typing")
        except (LucidError, MatrixCallError, RuntimeError) as exc:
            logger.debug("typing notification failed in room %s: %s", room, exc)

    def cancel_typing(self) -> None:
        for task in self._typing.values():
            task.cancel()
        self._typing.clear()

    # -- files -----------------------------------------------------------------------------
    async def send_file(self, room: str, path: Path, *, caption: str | None = None) -> str:
        """Upload ``path`` and post it as ``m.image``/``m.audio``/``m.video``/``m.file``."""
        if self._is_encrypted(room):
            raise DeliveryFailed(f"room {room} is end-to-end encrypted", permanent=True)
        data = await asyncio.to_thread(path.read_bytes)
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"

        async def upload() -> Any:
            response, _ = await self._client().upload(lambda *_: data, content_type=mime,
                                                     filename=path.name, filesize=len(data))
            return response

        uploaded = await self.limiter.run(room, lambda: checked("upload", upload), what="upload")
        kind = next((k for k in ("image", "audio", "video") if mime.startswith(k + "/")), "file")
        content = {"msgtype": f"m.{kind}", "body": caption or path.name, "filename": path.name,
                   "url": uploaded.content_uri, "info": {"mimetype": mime, "size": len(data)}}
        return await self.room_send(room, content)


def _key(target: Target) -> tuple[str, str | None]:
    return (target.chat_id, target.reply_to)
