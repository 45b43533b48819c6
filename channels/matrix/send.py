"""Outbound delivery for the Matrix channel: replies, streaming edits, typing, files.

Every call goes through the channel's ``OutboundLimiter`` (pacing, 429 ``retry_after_ms``,
bounded retries; see ``channels.matrix.calls``). A reply's pieces are sent with transaction
ids derived from its outbox delivery id (``lucid-<id>-<n>``), so a retry after an outage or
a restart — even one after the homeserver had already accepted the piece — never posts it
twice: the homeserver answers a repeated transaction with the event it already made.

With streaming on, progress becomes one message per turn that is edited in place
(``m.replace``) at most once per interval; the final reply's first piece is the last edit.

Files a reply names (``OutboundText.files``) follow its text, each uploaded and posted as one
more part (``m.image`` for images, ``m.file`` otherwise): a retry skips the parts already
posted, and a file gone or grown too big by send time is named in the text instead.

Encrypted rooms are refused here too: nothing but the one fixed notice is ever sent into
a room the homeserver marks encrypted (the answer would go out unencrypted).
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nio import AsyncClient

from lucidgate.channels import outfiles
from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry, OutboundLimiter
from lucidgate.channels.matrix.calls import MatrixCallError, checked
from lucidgate.channels.matrix.format import MAX_CHUNK_CHARS, edit_content, message_content, reply_to, split_markdown
from lucidgate.channels.messages import OutboundError, OutboundMessage, OutboundProgress, OutboundText, OutboundTyping, Target
from lucidgate.channels.parts import send_parts
from lucidgate.channels.previews import Previews
from lucidgate.channels.typing_indicator import TypingIndicator
from lucidgate.config.errors import LucidError

logger = logging.getLogger(__name__)

PREVIEW_MAX_CHARS = 4000
TYPING_TIMEOUT_MS = 30_000


def _delivery_error(exc: Exception) -> DeliveryRetry | DeliveryFailed | None:
    """The homeserver's refusal for good, or what may pass later (a 429 after its wait)."""
    if isinstance(exc, MatrixCallError):
        if not exc.transient:
            return DeliveryFailed(str(exc), permanent=True)
        after = exc.retry_after_ms / 1000 if exc.rate_limited and exc.retry_after_ms else None
        return DeliveryRetry(str(exc), after_s=after)
    if isinstance(exc, LucidError | OSError):  # OSError: a file vanished while being read
        return DeliveryRetry(str(exc))
    return None


class MatrixSender:
    """Sends ``OutboundMessage``s with the client ``get_client()`` returns (it exists only
    while the channel runs; the sender and its preview state live as long as the channel)."""

    def __init__(self, get_client: Callable[[], AsyncClient], limiter: OutboundLimiter, *,
                 msgtype: str, streaming: bool, is_encrypted: Callable[[str], bool],
                 workspace: Path | outfiles.FileRoots | None = None,
                 preview_interval_s: float = 1.0, typing_refresh_s: float = 25.0,
                 typing_max_s: float = 120.0) -> None:
        self._client = get_client
        self.limiter = limiter
        self._msgtype = f"m.{msgtype}"
        self._streaming = streaming
        self._is_encrypted = is_encrypted
        self._workspace = workspace
        # Matrix shows "typing" for the timeout given: renewed until the reply (or a cap).
        self.typing: TypingIndicator[str] = TypingIndicator(
            "matrix", lambda room: self._typing_call(room, True), refresh_s=typing_refresh_s, max_s=typing_max_s)
        self._previews: Previews[str] = Previews(preview_interval_s)

    async def send(self, msg: OutboundMessage) -> None:
        room = msg.target.chat_id
        if isinstance(msg, OutboundTyping):
            if not self._is_encrypted(room):
                await self.typing.start(room)
            return
        if isinstance(msg, OutboundProgress):
            if self._streaming and not self._is_encrypted(room):
                await self._preview(msg.target, msg.text or (f"_{msg.activity}_" if msg.activity else ""))
            return
        if self.typing.stop(room):
            await self._typing_call(room, False)
        if self._is_encrypted(room):
            raise DeliveryFailed(f"room {room} is end-to-end encrypted; lucidgate does not send there",
                                 permanent=True)
        await self._deliver(msg)

    # -- replies ---------------------------------------------------------------------------
    async def _deliver(self, msg: OutboundText | OutboundError) -> None:
        """The text's pieces, then its files; each one part (``parts_done`` on a failure)."""
        plain = isinstance(msg, OutboundText) and msg.plain
        msgtype = "m.notice" if plain or isinstance(msg, OutboundError) else self._msgtype
        text, sendable = await self._files(msg.text, msg.files if isinstance(msg, OutboundText) else (),
                                           msg.agent if isinstance(msg, OutboundText) else "")
        pieces = split_markdown(text, MAX_CHUNK_CHARS) if not plain else [text]
        parts: list[str | outfiles.OutFile] = [*pieces, *sendable]
        preview = None if plain else self._previews.take(_key(msg.target))
        txn_base = f"lucid-{msg.delivery_id}" if msg.delivery_id else f"lucid-{uuid.uuid4().hex}"

        async def send_one(i: int, part: str | outfiles.OutFile) -> None:
            if isinstance(part, outfiles.OutFile):
                await self.send_file(msg.target.chat_id, part.path, txn_id=f"{txn_base}-{i}")
                return
            content = message_content(part, msgtype=msgtype, plain=plain)
            if i == 0 and preview is not None:
                content = edit_content(preview.message_id, content)
            elif i == 0:
                content = reply_to(content, msg.target.reply_to)
            await self.room_send(msg.target.chat_id, content, f"{txn_base}-{i}")

        await send_parts(parts, send_one, skip=msg.skip_parts, failure=_delivery_error,
                         where=f"Matrix room {msg.target.chat_id}")

    async def _files(self, text: str, files: Sequence[str], agent: str = "") -> tuple[str, list[outfiles.OutFile]]:
        """The files that can go out now, and ``text`` naming those that cannot."""
        if not files:
            return text, []
        if self._workspace is None:
            return outfiles.unsent_note(text, files, "matrix"), []
        sendable, problems = await asyncio.to_thread(outfiles.ready, self._workspace, files, agent)
        return outfiles.with_problems(text, problems), sendable

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

        async def post(shown: str) -> str:
            return await self.room_send(target.chat_id, reply_to(message_content(shown, msgtype=self._msgtype),
                                                                 target.reply_to))

        async def edit(event_id: str, shown: str) -> None:
            new = message_content(shown, msgtype=self._msgtype)
            await self.room_send(target.chat_id, edit_content(event_id, new))

        try:
            await self._previews.show(_key(target), text, post=post, edit=edit)
        except (LucidError, MatrixCallError) as exc:
            logger.debug("streaming preview update failed in room %s: %s", target.chat_id, exc)

    # -- typing ----------------------------------------------------------------------------
    async def _typing_call(self, room: str, on: bool) -> None:
        try:
            await self.limiter.run(None, lambda: checked("typing", lambda: self._client().room_typing(
                room, on, timeout=TYPING_TIMEOUT_MS)), what="typing")
        except (LucidError, MatrixCallError, RuntimeError) as exc:
            logger.debug("typing notification failed in room %s: %s", room, exc)

    # -- files -----------------------------------------------------------------------------
    async def send_file(self, room: str, path: Path, *, caption: str | None = None,
                        txn_id: str | None = None) -> str:
        """Upload ``path`` and post it as ``m.image``/``m.audio``/``m.video``/``m.file``.

        A retry uploads the bytes again (an unreferenced copy at worst) but posts the event
        with the same ``txn_id``, so the room shows the file once.
        """
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
        return await self.room_send(room, content, txn_id)


def _key(target: Target) -> tuple[str, str | None]:
    return (target.chat_id, target.reply_to)
