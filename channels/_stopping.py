"""The shared first half of a platform channel's stop: end its own tasks, then give queued
replies a bounded chance to go out before the channel leaves the bus.

Whatever is still queued after the bound stays in the durable outbox (where there is one) and
goes out at the next start; the caller's message says which, in the channel's words.
"""

from __future__ import annotations

import asyncio
import logging

from lucidgate.channels.bus import MessageBus

FLUSH_BOUND_S = 10.0


async def cancel_tasks(tasks: dict[str, asyncio.Task[None]]) -> None:
    """Cancel every task, wait until all have ended (errors swallowed), forget them."""
    for task in list(tasks.values()):
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    tasks.clear()


async def flush_replies(bus: MessageBus, logger: logging.Logger, leftover: str) -> None:
    """Wait up to ``FLUSH_BOUND_S`` for queued replies; log ``leftover`` if some remain."""
    try:
        await asyncio.wait_for(bus.flush_outbound(), FLUSH_BOUND_S)
    except TimeoutError:
        logger.warning(leftover)
