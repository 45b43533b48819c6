"""A "typing…" indicator kept alive while a turn runs, one refresh task per chat.

Platforms show the indicator for a few seconds only (Telegram ~5 s, Discord ~10 s, Matrix for
the timeout we give), while a turn can take minutes. So the first ``OutboundTyping`` shows it
at once and starts a task that shows it again every ``refresh_s`` until the reply (or an error
reply) stops it, the channel stops, or ``max_s`` passes — a cap, so a turn that never answers
does not leave the bot "typing" for ever.

``show`` is the platform's one call; it handles (and logs) the platform's own errors, so one
failed refresh does not end the indicator. Anything else it raises ends that chat's loop:
it is logged once, and the next turn starts a fresh one.

Not a ``KeyedWorkers`` user: that primitive drains a queue of items per key, while here each
key has no items, only one timer loop that a reply cancels.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class TypingIndicator(Generic[T]):
    """Keeps ``show(target)`` repeating per chat (``key(target)``) from ``start`` to ``stop``."""

    def __init__(self, name: str, show: Callable[[T], Awaitable[None]], *, refresh_s: float, max_s: float,
                 key: Callable[[T], Hashable] = lambda target: target) -> None:
        self.name = name
        self._show = show
        self._refresh_s = refresh_s
        self._max_s = max_s
        self._key = key
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}

    async def start(self, target: T) -> None:
        """Show the indicator now and keep refreshing it (nothing new if it already runs)."""
        key = self._key(target)
        task = self._tasks.get(key)
        if task is not None and not task.done():
            return
        await self._show(target)
        self._tasks[key] = asyncio.create_task(self._loop(key, target), name=f"{self.name}-typing-{key}")

    def stop(self, target: T) -> bool:
        """End ``target``'s refreshing (its reply is going out); True if it was running."""
        task = self._tasks.pop(self._key(target), None)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def task(self, target: T) -> asyncio.Task[None] | None:
        """The loop refreshing ``target``'s indicator, while there is one."""
        return self._tasks.get(self._key(target))

    def cancel_all(self) -> None:
        """End every loop (the channel is stopping)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    async def _loop(self, key: Hashable, target: T) -> None:
        deadline = time.monotonic() + self._max_s
        try:
            while True:
                await asyncio.sleep(self._refresh_s)
                if time.monotonic() >= deadline:
                    break
                await self._show(target)
        except Exception:
            logger.exception("%s: the typing indicator for %s failed; it stops for this turn", self.name, key)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]
