"""Slack streaming previews: one placeholder reply per turn, edited as the answer grows.

With ``channels.slack.streaming`` on, the first preview (the answer so far, or the step
that runs, "running grep…") is posted as a reply and then edited with ``chat.update`` at
most once per ``previewIntervalS`` — Slack allows about one edit a second per channel, and
every call still goes through the channel's rate limiter. The final answer replaces the
placeholder (its first part; longer answers continue in new messages), so the thread ends
with exactly the text a non-streaming reply would have.

Previews are best-effort: a failed preview call is logged at debug level and forgotten;
the final text is the outbox's business and is never lost to a preview problem — when the
placeholder cannot be edited, the final part is posted anew.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.messages import Target
from lucidgate.channels.previews import Previews
from lucidgate.channels.slack.format import payload, to_chunks
from lucidgate.config.errors import LucidError

logger = logging.getLogger(__name__)

PREVIEW_MAX_CHARS = 3000  # a preview is a glimpse; the final text is split properly

PostFn = Callable[[str, str, str | None], Awaitable[Any]]  # (channel, markdown, thread_ts)


def _key(target: Target) -> tuple[str, str | None, str | None]:
    return (target.chat_id, target.thread_id, target.reply_to)


class SlackPreviews:
    """The placeholders of the turns now running, by chat, thread and message replied to."""

    def __init__(self, web: Any, limiter: OutboundLimiter, *, interval_s: float) -> None:
        self.web = web
        self.limiter = limiter
        self._open: Previews[str] = Previews(interval_s)

    @property
    def interval_s(self) -> float:
        """The least time between two edits of a placeholder."""
        return self._open.interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._open.interval_s = value

    async def show(self, target: Target, text: str, activity: str | None, post: PostFn) -> None:
        """Post or edit the turn's placeholder with the answer so far (or the step)."""
        # the first chunk of the answer so far: a preview cut mid-markup would show stray ** or ```
        chunks = to_chunks(text or (f"_{activity}_" if activity else ""), PREVIEW_MAX_CHARS)
        if not chunks:
            return

        async def post_placeholder(shown: str) -> str:
            return str((await post(target.chat_id, shown, target.thread_id))["ts"])

        try:
            await self._open.show(_key(target), chunks[0], post=post_placeholder,
                                  edit=lambda ts, shown: self.update(target.chat_id, ts, shown))
        except (SlackApiError, LucidError, KeyError, TypeError) as exc:
            logger.debug("Slack preview update failed in %s: %s", target.chat_id, exc)

    def take(self, target: Target) -> str | None:
        """The placeholder's ts for the final answer to replace (and forget it)."""
        placeholder = self._open.take(_key(target))
        return placeholder.message_id if placeholder is not None else None

    async def update(self, channel: str, ts: str, text: str) -> None:
        """Edit the placeholder to show ``text`` (Markdown) in a ``markdown`` block."""
        body = payload(text)
        await self.limiter.run(channel, lambda: self.web.chat_update(channel=channel, ts=ts, **body),
                               what="chat.update")

    async def replace(self, channel: str, ts: str, text: str) -> bool:
        """Put the final part into the placeholder; False means post it anew."""
        try:
            await self.update(channel, ts, text)
        except SlackApiError as exc:
            logger.warning("could not edit the Slack placeholder in %s (%s); posting anew", channel, exc)
            return False
        return True
