"""Long-poll intake for the Matrix channel: ``/sync`` with the token persisted after each batch.

The ordering is the point, as with Telegram's offset: every event of a sync batch is handed
to ``handle`` (which journals it via the bus) *before* the batch's ``next_batch`` token is
written to ``state/matrix.json`` and used for the next ``/sync``. A crash replays at most
the batch in hand (the bus drops what it already journalled by event id), never skips one.

The first sync of each run asks for the full room state (membership, encryption), which is
how nio learns which rooms are direct chats after a restart. The first sync of an account
with no token yet is a catch-up: invites are handled, older messages are not answered.
Failures back off exponentially and log one line per incident; a batch whose handling keeps
failing is skipped after three tries so one bad event cannot stall the channel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nio import AsyncClient, SyncResponse

from lucidgate.channels.bus import BusClosed
from lucidgate.channels.matrix.calls import MatrixCallError, error_of
from lucidgate.channels.matrix.state import MatrixState, save_state
from lucidgate.config.backoff import backoff_delay

logger = logging.getLogger("lucidgate.channels.matrix")

# Only what a turn needs: room timelines and state; no presence or account data.
SYNC_FILTER: dict[str, Any] = {
    "presence": {"not_types": ["*"]},
    "account_data": {"not_types": ["*"]},
    "room": {"timeline": {"limit": 100}, "account_data": {"not_types": ["*"]},
             "ephemeral": {"not_types": ["*"]}},
}
MAX_BATCH_TRIES = 3

Handler = Callable[[SyncResponse, bool], Awaitable[None]]


class MatrixSyncer:
    """Runs the sync loop; ``handle(response, catch_up)`` processes one batch."""

    def __init__(self, client: Callable[[], AsyncClient], handle: Handler, *, state: MatrixState,
                 state_path: Path, timeout_s: int, retry_base_s: float, retry_max_s: float) -> None:
        self._client = client
        self._handle = handle
        self.state = state
        self._state_path = state_path
        self._timeout_ms = timeout_s * 1000
        self._retry = (retry_base_s, retry_max_s)
        self.batches = 0
        self.synced = asyncio.Event()  # set after the first batch of this run is handled

    async def run(self) -> None:
        failures = batch_tries = 0
        first = True
        while True:
            client = self._client()
            client.next_batch = self.state.next_batch or ""  # nio would otherwise resume from its own
            try:
                response = await client.sync(timeout=0 if first else self._timeout_ms,
                                                      sync_filter=SYNC_FILTER, since=self.state.next_batch,
                                                      full_state=first or None)
                error = error_of("sync", response)
                if error is not None:
                    raise error
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1:  # one line per incident, not per attempt
                    if isinstance(exc, MatrixCallError) and exc.unauthorized:
                        logger.error("the homeserver rejected the Matrix access token (%s); check "
                                     "channels.matrix.accessToken / password", exc.errcode)
                    else:
                        logger.warning("Matrix sync failed (%s); retrying with backoff", _describe(exc))
                await asyncio.sleep(backoff_delay(failures, *self._retry))
                continue
            if failures:
                logger.info("Matrix sync recovered after %d failed attempt(s)", failures)
                failures = 0
            assert isinstance(response, SyncResponse)
            try:
                await self._handle(response, self.state.next_batch is None)
            except BusClosed:
                return  # not acknowledged: the batch is synced again after the restart
            except Exception:
                batch_tries += 1
                if batch_tries < MAX_BATCH_TRIES:
                    logger.exception("handling a Matrix sync batch failed; it will be retried")
                    await asyncio.sleep(backoff_delay(batch_tries, *self._retry))
                    continue
                logger.error("a Matrix sync batch failed %d times; skipping it", batch_tries)
            batch_tries = 0
            first = False
            self.state.next_batch = response.next_batch
            self.batches += 1
            await self.save()
            self.synced.set()

    async def save(self) -> None:
        try:
            await asyncio.to_thread(save_state, self._state_path, self.state)
        except OSError:
            logger.exception("could not persist the Matrix sync token to %s", self._state_path)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
