"""Long-poll intake for the Telegram channel: ``getUpdates``, the persisted offset, the watchdog.

The ordering is the point: each update is handed to ``handle_update`` (which journals it
via the bus) *before* its ``update_id`` is persisted to ``state/telegram.json`` and the
next ``getUpdates`` offset acknowledges it, so a crash or restart never loses a message.
Failures back off exponentially and log one line per incident (and one on recovery), not
one per attempt. A watchdog restarts the polling task when it stops making progress — a
hung connection or a stuck await — but not while the bus applies back-pressure.

The poller holds no reference to the channel: it is given the bot, the update handler and
the channel's task launcher as callables, so the channel still owns (and cancels) its tasks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lucidgate.channels.bus import BusClosed
from lucidgate.config.backoff import backoff_delay
from lucidgate.config.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from telegram import Update

    from lucidgate.channels.telegram.settings import TelegramSettings

# Deliberately the channel's logger, not ``__name__``: these records were always
# ``channels.telegram``'s, and levels, handlers and filters configured for it must keep covering them.
logger = logging.getLogger("lucidgate.channels.telegram")

Spawn = Callable[[str, Coroutine[Any, Any, None]], asyncio.Task[None]]


def read_state(path: Path) -> int | None:
    """The last acknowledged ``update_id``, or ``None`` to let Telegram pick the offset."""
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("last_update_id")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        logger.warning("%s is unreadable; polling starts from Telegram's own offset", path)
        return None
    return value if isinstance(value, int) else None


class TelegramPoller:
    """Runs the ``poll`` and ``watchdog`` tasks through the owner's ``spawn``.

    ``handle_update`` raising ``BusClosed`` ends polling on purpose (shutdown): that update
    stays unacknowledged so Telegram redelivers it, and the watchdog does not restart it.
    ``in_backpressure`` reports whether the handler is waiting on a full bus.
    """

    def __init__(
        self,
        bot: Callable[[], Any],
        handle_update: Callable[[Update], Awaitable[None]],
        *,
        spawn: Spawn,
        in_backpressure: Callable[[], bool],
        redact: Callable[[str], str],
        state_path: Path,
        settings: TelegramSettings,
        allowed_updates: Sequence[str],
    ) -> None:
        self._bot = bot
        self._handle_update = handle_update
        self._spawn = spawn
        self._in_backpressure = in_backpressure
        self._redact = redact
        self._state_path = state_path
        self._allowed_updates = list(allowed_updates)
        self._poll_timeout_s = settings.poll_timeout_s
        self._watchdog_s = settings.watchdog_s
        self._request_timeout_s = settings.request_timeout_s
        self._retry = (settings.retry_base_s, settings.retry_max_s)
        self._poll_task: asyncio.Task[None] | None = None
        self._last_beat = time.monotonic()
        self.last_update_id: int | None = None
        self.poll_restarts = 0

    async def load_state(self) -> None:
        self.last_update_id = await asyncio.to_thread(read_state, self._state_path)

    def start(self) -> None:
        self._poll_task = self._spawn("poll", self._poll_loop())
        self._spawn("watchdog", self._watchdog())

    def _backoff(self, failures: int) -> float:
        return backoff_delay(failures, *self._retry)

    async def _poll_loop(self) -> None:
        """getUpdates → publish each update → persist its id → the next call acknowledges it."""
        failures = 0
        update_failures: dict[int, int] = {}
        while True:
            self._last_beat = time.monotonic()
            offset = self.last_update_id + 1 if self.last_update_id is not None else None
            try:
                updates = await self._bot().get_updates(
                    offset=offset, timeout=self._poll_timeout_s, allowed_updates=self._allowed_updates
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1:  # once per incident, not per attempt
                    reason = self._redact(repr(exc))
                    logger.warning("Telegram polling failed (%s); retrying with backoff", reason)
                self._last_beat = time.monotonic()
                await asyncio.sleep(self._backoff(failures))
                continue
            if failures:
                logger.info("Telegram polling recovered after %d failed attempt(s)", failures)
                failures = 0
            handled = False
            for update in updates:
                if self.last_update_id is not None and update.update_id <= self.last_update_id:
                    continue
                try:
                    await self._handle_update(update)
                except BusClosed:
                    return  # not acknowledged: Telegram redelivers it after the restart
                except Exception:
                    count = update_failures[update.update_id] = update_failures.get(update.update_id, 0) + 1
                    if count < 3:
                        logger.exception("Telegram update %d failed; will retry it", update.update_id)
                        break
                    logger.error("Telegram update %d failed %d times; skipping it", update.update_id, count)
                update_failures.pop(update.update_id, None)
                self.last_update_id = update.update_id
                self._last_beat = time.monotonic()
                handled = True
            if handled:
                await self._save_state()
            if update_failures:
                await asyncio.sleep(self._backoff(max(update_failures.values())))

    async def _save_state(self) -> None:
        payload = json.dumps({"last_update_id": self.last_update_id}).encode()
        try:
            await asyncio.to_thread(atomic_write_bytes, self._state_path, payload)
        except OSError:
            logger.exception("could not persist the Telegram offset to %s", self._state_path)

    async def _watchdog(self) -> None:
        """Restart the polling task when it makes no progress (a hung connection, a stuck await)."""
        limit = self._watchdog_s
        if limit <= self._poll_timeout_s + self._request_timeout_s:
            logger.warning("channels.telegram.watchdogS (%ss) should exceed pollTimeoutS plus the request "
                           "timeout (%ss), or healthy long polls get restarted",
                           limit, self._poll_timeout_s + self._request_timeout_s)
        while True:
            await asyncio.sleep(max(0.05, limit / 4))
            poll = self._poll_task
            if poll is not None and poll.done() and not poll.cancelled() and poll.exception() is None:
                return  # polling ended on purpose (the bus closed for shutdown)
            if self._in_backpressure():  # waiting on a full bus is back-pressure, not a hang
                self._last_beat = time.monotonic()
                continue
            if time.monotonic() - self._last_beat <= limit:
                continue
            logger.warning("Telegram polling made no progress for %.0fs; restarting it", limit)
            self.poll_restarts += 1
            if poll is not None:
                poll.cancel()
                await asyncio.gather(poll, return_exceptions=True)
            self._poll_task = self._spawn("poll", self._poll_loop())
