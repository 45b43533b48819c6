"""Outbound delivery for the Discord channel: replies, files, streaming previews, typing.

Every REST call goes through the channel's ``OutboundLimiter`` and discord.py's own HTTP
client (which already honours Discord's rate-limit buckets and waits out a 429's
``retry_after`` of up to ``max_ratelimit_timeout``; a longer one surfaces as
``RateLimited`` and pauses the whole channel here). Replies are rendered to Discord
markdown and split at 2,000 characters (``channels.discord.format``); mentions in a reply
never ping anyone (``AllowedMentions.none()``), so a model that writes ``@everyone`` pings
nobody. With streaming on, progress updates become one message per turn that is edited in
place (at most once per interval) and finally replaced by the reply's first part.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import discord

from lucidgate.channels import outfiles
from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry, OutboundLimiter, Verdict
from lucidgate.channels.discord.format import MAX_MESSAGE_CHARS, split_plain, to_chunks
from lucidgate.channels.discord.press import button_view
from lucidgate.channels.messages import OutboundError, OutboundMessage, OutboundProgress, OutboundText, Target
from lucidgate.channels.parts import send_parts
from lucidgate.channels.platform import route
from lucidgate.channels.previews import Preview, Previews
from lucidgate.channels.typing_indicator import TypingIndicator
from lucidgate.config.errors import LucidError

logger = logging.getLogger(__name__)

MAX_FILES_PER_MESSAGE = 10  # Discord's limit for attachments on one message
NO_PINGS = discord.AllowedMentions.none()


def classify(exc: BaseException) -> Verdict:
    """How the limiter treats a failed REST call (see ``channels._ratelimit``).

    discord.py has already retried 5xx answers (500/502/504) and short 429s itself, so a
    server error is handed to the outbox's slower backoff rather than retried again here."""
    if isinstance(exc, discord.RateLimited):
        return Verdict.wait(exc.retry_after)
    if isinstance(exc, discord.HTTPException) and exc.status == 429:  # a 429 without Discord's body
        header = exc.response.headers.get("Retry-After") if exc.response is not None else None
        try:
            return Verdict.wait(float(header or 1.0))
        except ValueError:
            return Verdict.wait(1.0)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Verdict.retry()  # the connection never opened: nothing was sent
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return Verdict.uncertain()  # it may have arrived
    return Verdict.fail()


def permanent(exc: BaseException) -> bool:
    """Refused for good: the chat is gone, the bot lacks access, or the payload is invalid."""
    return isinstance(exc, discord.HTTPException) and 400 <= exc.status < 500 and exc.status != 429


def _delivery_error(exc: Exception) -> DeliveryRetry | DeliveryFailed | None:
    """A refusal for good (unknown channel, missing access, invalid body), or what may pass
    later (5xx, network)."""
    if isinstance(exc, discord.HTTPException) and permanent(exc):
        return DeliveryFailed(str(exc), permanent=True)
    if isinstance(exc, discord.HTTPException | aiohttp.ClientError | OSError | RuntimeError):
        return DeliveryRetry(f"{type(exc).__name__}: {exc}")
    return None


class DiscordSender:
    """Sends ``OutboundMessage``s with the client ``get_client()`` returns (it exists only
    while the channel runs; this sender and its preview state live as long as the channel)."""

    def __init__(self, get_client: Callable[[], discord.Client], limiter: OutboundLimiter, *,
                 workspace: Path | outfiles.FileRoots, streaming: bool, preview_interval_s: float = 1.0,
                 typing_refresh_s: float = 8.0, typing_max_s: float = 120.0) -> None:
        self._get_client = get_client
        self.limiter = limiter
        self._workspace = workspace
        self._streaming = streaming
        # One trigger shows ~10 s: refreshed until the reply (or a cap).
        self.typing: TypingIndicator[Target] = TypingIndicator(
            "discord", self._send_typing, refresh_s=typing_refresh_s, max_s=typing_max_s,
            key=lambda target: target.chat_id)
        self._previews: Previews[int] = Previews(preview_interval_s)

    async def send(self, msg: OutboundMessage) -> None:
        await route(msg, self.typing, preview=self._preview if self._streaming else None, reply=self._reply)

    async def _reply(self, msg: OutboundText | OutboundError) -> None:
        plain = isinstance(msg, OutboundText) and msg.plain
        text, files = msg.text, []
        if isinstance(msg, OutboundText) and msg.files:
            ready, problems = await asyncio.to_thread(outfiles.ready, self._workspace, msg.files, msg.agent)
            text, files = outfiles.with_problems(text, problems), [f.path for f in ready]
        buttons = msg.buttons if isinstance(msg, OutboundText) else ()
        await self.deliver(msg.target, text, plain=plain, skip_parts=msg.skip_parts, files=files, buttons=buttons)

    # -- replies ---------------------------------------------------------------------------
    async def deliver(self, target: Target, text: str, *, plain: bool = False, skip_parts: int = 0,
                      files: Sequence[Path] = (), buttons: Sequence[tuple[str, str]] = ()) -> None:
        """Send ``text`` (markdown, or ``plain`` as written) in parts, then ``files``;
        ``buttons`` go under the last text part.

        Raises the outbox's typed errors with the number of parts Discord accepted:
        ``DeliveryFailed(permanent=True)`` for a refusal for good (unknown channel, missing
        access, invalid body), ``DeliveryRetry`` for what may pass later (5xx, network)."""
        chunks = split_plain(text, MAX_MESSAGE_CHARS) if plain else to_chunks(text, MAX_MESSAGE_CHARS)
        batches = [list(files[i:i + MAX_FILES_PER_MESSAGE]) for i in range(0, len(files), MAX_FILES_PER_MESSAGE)]
        parts: list[tuple[str, list[Path]]] = [(c, []) for c in chunks] + [("", b) for b in batches]
        preview = None if plain else self._previews.take(_preview_key(target))

        async def send_one(i: int, part: tuple[str, list[Path]]) -> None:
            chunk, attach = part
            if i == 0 and preview is not None and not attach and await self._replace(target, preview, chunk):
                return
            last = buttons if i == len(chunks) - 1 else ()
            await self.send_chunk(target, chunk, target.reply_to if i == 0 else None, files=attach, buttons=last)

        await send_parts(parts, send_one, skip=skip_parts, failure=_delivery_error,
                         where=f"Discord channel {target.chat_id}")

    async def send_chunk(self, target: Target, text: str, reply_to: str | None, *,
                         files: Sequence[Path] = (), buttons: Sequence[tuple[str, str]] = ()) -> discord.Message:
        """One ``POST /channels/{id}/messages`` (a reply to ``reply_to`` when it still exists)."""
        channel = self._get_client().get_partial_messageable(int(target.chat_id))
        kwargs: dict[str, Any] = {"allowed_mentions": NO_PINGS}
        view = button_view(buttons)
        if view is not None:
            kwargs["view"] = view
        if reply_to and reply_to.isdigit():
            kwargs["reference"] = discord.MessageReference(
                message_id=int(reply_to), channel_id=int(target.chat_id), fail_if_not_exists=False)

        async def post() -> discord.Message:
            if not files:
                return await channel.send(content=text, **kwargs)
            opened = [await asyncio.to_thread(discord.File, str(path), filename=path.name) for path in files]
            try:
                return await channel.send(content=text or None, files=opened, **kwargs)
            finally:
                for f in opened:
                    f.close()

        return await self.limiter.run(target.chat_id, post, what="createMessage")

    async def _edit(self, target: Target, message_id: int, text: str) -> None:
        channel = self._get_client().get_partial_messageable(int(target.chat_id))
        message = channel.get_partial_message(message_id)
        await self.limiter.run(target.chat_id, lambda: message.edit(content=text, allowed_mentions=NO_PINGS),
                               what="editMessage")

    async def _replace(self, target: Target, preview: Preview[int], chunk: str) -> bool:
        """Put the final first part into the streaming message; False means send it anew."""
        if chunk == preview.text:
            return True
        try:
            await self._edit(target, preview.message_id, chunk)
        except discord.HTTPException as exc:
            if not permanent(exc):
                raise
            logger.warning("could not edit the streaming message in %s (%s); sending anew", target.chat_id, exc)
            return False
        return True

    async def _preview(self, msg: OutboundProgress) -> None:
        """Streaming: one message per turn, edited at most once per interval (best-effort)."""
        target = msg.target
        chunks = to_chunks(msg.text or (f"*{msg.activity}*" if msg.activity else ""), MAX_MESSAGE_CHARS)
        if not chunks:
            return

        async def post(shown: str) -> int:
            return (await self.send_chunk(target, shown, target.reply_to)).id

        try:
            await self._previews.show(_preview_key(target), chunks[0], post=post,
                                      edit=lambda message_id, shown: self._edit(target, message_id, shown))
        except (discord.HTTPException, aiohttp.ClientError, OSError, LucidError) as exc:
            logger.debug("streaming preview update failed in %s: %s", target.chat_id, exc)

    # -- typing ----------------------------------------------------------------------------
    async def _send_typing(self, target: Target) -> None:
        channel = self._get_client().get_partial_messageable(int(target.chat_id))
        try:
            await self.limiter.run(None, lambda: _typing_once(channel), what="triggerTyping")
        except (discord.HTTPException, aiohttp.ClientError, OSError, LucidError) as exc:
            logger.debug("typing indicator failed in %s: %s", target.chat_id, exc)


async def _typing_once(channel: discord.PartialMessageable) -> None:
    await channel.typing()  # awaited (not entered): one trigger, which Discord shows ~10 s


def _preview_key(target: Target) -> tuple[str, str | None]:
    return (target.chat_id, target.reply_to)
