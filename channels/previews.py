"""Streaming previews: one message per running turn, edited as the answer grows.

With streaming on, a channel posts the answer so far (or the step that runs) as one message
and edits it at most once per ``interval_s`` — the platforms allow about one edit a second per
chat, and an edit that shows nothing new is not sent. The final reply then ``take``s the
preview to put its first part there, so the chat ends with what a non-streaming reply shows.

The platform calls (``post``, ``edit``) are the channel's; a preview is best-effort, so the
channel catches its own platform's errors around ``show`` and logs them at debug level.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - the platform's message id (an int, an event id, a Slack ts)


@dataclass(slots=True)
class Preview(Generic[I]):
    message_id: I
    text: str
    sent_at: float


class Previews(Generic[I]):
    """The preview message of each running turn, by the channel's key for a turn."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._shown: dict[Hashable, Preview[I]] = {}

    async def show(self, key: Hashable, text: str, *, post: Callable[[str], Awaitable[I]],
                   edit: Callable[[I, str], Awaitable[object]]) -> None:
        """Post the turn's preview with ``text``, or edit it when the interval has passed."""
        now = time.monotonic()
        preview = self._shown.get(key)
        if preview is None:
            self._shown[key] = Preview(await post(text), text, now)
        elif now - preview.sent_at >= self.interval_s and text != preview.text:
            preview.sent_at, preview.text = now, text
            await edit(preview.message_id, text)

    def shown(self, key: Hashable) -> Preview[I] | None:
        """The turn's preview as it stands (None before the first ``show``)."""
        return self._shown.get(key)

    def take(self, key: Hashable) -> Preview[I] | None:
        """The turn's preview for its final reply to replace (and forgotten here)."""
        return self._shown.pop(key, None)
