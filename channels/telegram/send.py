"""Outbound delivery for the Telegram channel: replies, files, streaming previews, typing indicators.

Every Bot API call goes through the channel's ``OutboundLimiter``. Replies are rendered to
Telegram HTML (``channels.telegram.markdown``), split into chunks, and resent as plain text when
Telegram rejects the markup. With streaming on, progress updates become one preview message
per turn that is edited in place and finally replaced by the reply's first chunk. Files named
by a reply follow its text, one ``sendPhoto`` (images) or ``sendDocument`` each.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Message, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.warnings import PTBDeprecationWarning
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError, TimedOut

from lucidgate.channels import outfiles
from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry, OutboundLimiter, Verdict
from lucidgate.channels.messages import OutboundError, OutboundMessage, OutboundProgress, OutboundText, Target
from lucidgate.channels.parts import send_parts
from lucidgate.channels.platform import route
from lucidgate.channels.previews import Preview, Previews
from lucidgate.channels.telegram.markdown import MAX_MESSAGE_CHARS, html_to_plain, render, split_plain
from lucidgate.channels.typing_indicator import TypingIndicator
from lucidgate.config.errors import LucidError

logger = logging.getLogger(__name__)


def _retry_after_s(exc: RetryAfter) -> float:
    """The public ``retry_after`` in seconds. PTB 22.2+ returns an int with a deprecation
    warning (a timedelta once ``PTB_TIMEDELTA`` is on, the future default); both are read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        after = exc.retry_after
    return after.total_seconds() if isinstance(after, dt.timedelta) else float(after)


def classify(exc: BaseException) -> Verdict:
    """How the limiter treats a failed Bot API call (see ``channels._ratelimit``)."""
    if isinstance(exc, RetryAfter):
        return Verdict.wait(_retry_after_s(exc))
    if isinstance(exc, BadRequest):
        return Verdict.fail()
    cause = exc.__cause__
    if isinstance(exc, TimedOut):
        # Nothing left our side on a connect/pool timeout; any later timeout may have been delivered.
        if isinstance(cause, httpx.ConnectTimeout | httpx.PoolTimeout):
            return Verdict.retry()
        return Verdict.uncertain()
    if isinstance(exc, NetworkError):
        if cause is None or isinstance(cause, httpx.ConnectError):
            return Verdict.retry()  # an HTTP error status (5xx), or the connection never opened
        return Verdict.uncertain()
    return Verdict.fail()


def _delivery_error(exc: Exception) -> DeliveryRetry | DeliveryFailed | None:
    """A refusal for good (chat not found, bot blocked or kicked), or what may pass later."""
    if isinstance(exc, BadRequest | Forbidden):
        return DeliveryFailed(str(exc), permanent=True)
    if isinstance(exc, TelegramError):
        return DeliveryRetry(f"{type(exc).__name__}: {exc}")
    return None


def _keyboard(buttons: Sequence[tuple[str, str]]) -> InlineKeyboardMarkup:
    """One row of inline buttons; each carries its command (Telegram allows 64 bytes of data)."""
    return InlineKeyboardMarkup([[InlineKeyboardButton(label, callback_data=command[:64])
                                  for label, command in buttons]])


class TelegramSender:
    """Sends ``OutboundMessage``s with the bot ``get_bot()`` returns.

    The bot is fetched per call because it exists only while the channel is started, while
    this sender (and its preview state) lives as long as the channel.
    """

    def __init__(
        self,
        get_bot: Callable[[], Any],
        limiter: OutboundLimiter,
        *,
        streaming: bool,
        workspace: Path | outfiles.FileRoots | None = None,
        preview_interval_s: float = 1.0,
        typing_refresh_s: float = 4.0,
        typing_max_s: float = 120.0,
    ) -> None:
        self._get_bot = get_bot
        self.limiter = limiter
        self._streaming = streaming
        self._workspace = workspace
        # The indicator lasts ~5 s on Telegram's side: refreshed until the reply (or a cap).
        self.typing: TypingIndicator[Target] = TypingIndicator(
            "telegram", self._send_typing, refresh_s=typing_refresh_s, max_s=typing_max_s,
            key=lambda target: (target.chat_id, target.thread_id))
        self._previews: Previews[int] = Previews(preview_interval_s)

    async def send(self, msg: OutboundMessage) -> None:
        await route(msg, self.typing, preview=self._preview if self._streaming else None, reply=self._reply)

    async def _reply(self, msg: OutboundText | OutboundError) -> None:
        files = msg.files if isinstance(msg, OutboundText) else ()
        buttons = msg.buttons if isinstance(msg, OutboundText) else ()
        await self._deliver(msg.target, msg.text, plain=isinstance(msg, OutboundText) and msg.plain,
                            skip_parts=msg.skip_parts, files=files, buttons=buttons,
                            agent=msg.agent if isinstance(msg, OutboundText) else "")

    async def _deliver(self, target: Target, text: str, *, plain: bool = False, skip_parts: int = 0,
                       files: Sequence[str] = (), buttons: Sequence[tuple[str, str]] = (),
                       agent: str = "") -> None:
        """Markdown goes out as Telegram HTML; ``plain`` text (a refusal) exactly as written;
        then each of ``files`` (one part each, named in ``agent``'s workspace; one that cannot
        be sent is named in the text).

        Raises the outbox's typed errors (``channels._ratelimit``) with the number of parts
        Telegram accepted: ``DeliveryFailed(permanent=True)`` for a refusal for good (chat not
        found, bot blocked or kicked), ``DeliveryRetry``/``DeliveryFailed`` for what may pass.
        """
        sendable: list[outfiles.OutFile] = []
        if files:
            if self._workspace is None:
                text = outfiles.unsent_note(text, files, "telegram")
            else:
                sendable, problems = await asyncio.to_thread(outfiles.ready, self._workspace, files, agent)
                text = outfiles.with_problems(text, problems)
        chunks = split_plain(text, MAX_MESSAGE_CHARS) if plain else render(text, MAX_MESSAGE_CHARS)
        preview = None if plain else self._previews.take(_preview_key(target))
        parts: list[str | outfiles.OutFile] = [*chunks, *sendable]

        async def send_one(i: int, part: str | outfiles.OutFile) -> None:
            if isinstance(part, outfiles.OutFile):
                await self.send_file(target, part)
            elif i > 0 or preview is None or not await self._edit(target, preview, part):
                markup = _keyboard(buttons) if buttons and i == len(chunks) - 1 else None
                await self.send_chunk(target, part, target.reply_to if i == 0 else None, html=not plain,
                                      markup=markup)

        await send_parts(parts, send_one, skip=skip_parts, failure=_delivery_error,
                         where=f"Telegram chat {target.chat_id}")

    async def send_chunk(
        self, target: Target, text: str, reply_to: str | None, *, html: bool = True,
        markup: InlineKeyboardMarkup | None = None,
    ) -> Message:
        """One ``sendMessage``; HTML that Telegram cannot parse is resent as plain text."""
        kwargs: dict[str, Any] = {"chat_id": target.chat_id}
        if markup is not None:
            kwargs["reply_markup"] = markup
        if target.thread_id:
            kwargs["message_thread_id"] = int(target.thread_id)
        if reply_to and reply_to.isdigit():
            kwargs["reply_parameters"] = ReplyParameters(int(reply_to), allow_sending_without_reply=True)
        if not html:
            return await self.limiter.run(
                target.chat_id, lambda: self._get_bot().send_message(text=text, **kwargs)
            )
        try:
            return await self.limiter.run(
                target.chat_id,
                lambda: self._get_bot().send_message(text=text, parse_mode=ParseMode.HTML, **kwargs),
                what="sendMessage",
            )
        except BadRequest as exc:
            if "can't parse entities" not in str(exc).lower():
                raise
            logger.warning("Telegram rejected a reply's formatting (%s); resending it as plain text", exc)
            plain = html_to_plain(text)
            return await self.limiter.run(
                target.chat_id, lambda: self._get_bot().send_message(text=plain, **kwargs)
            )

    async def send_file(self, target: Target, file: outfiles.OutFile) -> Message:
        """One ``sendPhoto`` (an image) or ``sendDocument``; the bytes are read off the loop."""
        data = await asyncio.to_thread(file.path.read_bytes)
        kwargs: dict[str, Any] = {"chat_id": target.chat_id, "filename": file.name}
        if target.thread_id:
            kwargs["message_thread_id"] = int(target.thread_id)
        if file.is_image:
            return await self.limiter.run(
                target.chat_id, lambda: self._get_bot().send_photo(photo=data, **kwargs), what="sendPhoto")
        return await self.limiter.run(
            target.chat_id, lambda: self._get_bot().send_document(document=data, **kwargs), what="sendDocument")

    async def _edit(self, target: Target, preview: Preview[int], chunk: str) -> bool:
        """Replace the streaming preview with the final text; False means send it anew."""

        def edit(text: str, parse_mode: str | None) -> Any:
            return self.limiter.run(
                target.chat_id,
                lambda: self._get_bot().edit_message_text(
                    text=text, chat_id=target.chat_id, message_id=preview.message_id, parse_mode=parse_mode
                ),
                what="editMessageText",
            )

        try:
            await edit(chunk, ParseMode.HTML)
        except BadRequest as exc:
            reason = str(exc).lower()
            if "not modified" in reason:
                return True
            if "can't parse entities" not in reason:
                logger.warning("could not edit the preview in chat %s (%s); sending anew",
                               target.chat_id, exc)
                return False
            await edit(html_to_plain(chunk), None)
        return True

    async def _preview(self, msg: OutboundProgress) -> None:
        """Streaming: one preview message per turn, edited at most once per interval."""
        target, text = msg.target, msg.text[:MAX_MESSAGE_CHARS]
        if not text.strip():
            return

        async def post(shown: str) -> int:
            return (await self.send_chunk(target, shown, target.reply_to, html=False)).message_id

        async def edit(message_id: int, shown: str) -> None:
            await self.limiter.run(target.chat_id, lambda: self._get_bot().edit_message_text(
                text=shown, chat_id=target.chat_id, message_id=message_id), what="editMessageText")

        try:
            await self._previews.show(_preview_key(target), text, post=post, edit=edit)
        except (TelegramError, LucidError) as exc:
            logger.debug("streaming preview update failed in chat %s: %s", target.chat_id, exc)

    async def _send_typing(self, target: Target) -> None:
        kwargs: dict[str, Any] = {"message_thread_id": int(target.thread_id)} if target.thread_id else {}
        try:
            await self.limiter.run(
                None,
                lambda: self._get_bot().send_chat_action(target.chat_id, ChatAction.TYPING, **kwargs),
                what="sendChatAction",
            )
        except (TelegramError, LucidError) as exc:
            logger.debug("typing indicator failed in chat %s: %s", target.chat_id, exc)


def _preview_key(target: Target) -> tuple[str, str | None, str | None]:
    return (target.chat_id, target.thread_id, target.reply_to)
