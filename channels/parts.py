"""Sending a reply in parts, so that a retry resumes where the failed attempt stopped.

A long reply goes out as several platform messages (text chunks, then files). When one of
them fails, the outbox retries the whole item later; the error's ``parts_done`` tells that
retry how many parts the platform had already accepted, so the chat never shows a part
twice. ``send_parts`` keeps that count for every platform. A platform says only how its own
errors map onto the outbox's (``failure``): ``DeliveryRetry`` for what may pass later,
``DeliveryFailed(permanent=True)`` for a refusal for good (logged here, with the part), or
None for an error that is not the platform's (it propagates unchanged).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry

logger = logging.getLogger(__name__)

P = TypeVar("P")
DeliveryError = DeliveryRetry | DeliveryFailed


async def send_parts(parts: Sequence[P], send_one: Callable[[int, P], Awaitable[object]], *, skip: int,
                     failure: Callable[[Exception], DeliveryError | None], where: str) -> None:
    """Send ``parts[skip:]`` in order with ``send_one(index, part)``; on a failure raise the
    outbox's error with ``parts_done`` set to the index of the part that failed. ``where``
    names the chat in the log line of a refusal ("Telegram chat 42")."""
    for i, part in enumerate(parts):
        if i < skip:
            continue
        try:
            await send_one(i, part)
        except (DeliveryRetry, DeliveryFailed) as exc:  # the limiter's verdict, already typed
            exc.parts_done = i
            raise
        except Exception as exc:
            error = failure(exc)
            if error is None:
                raise
            error.parts_done = i
            if isinstance(error, DeliveryFailed) and error.permanent:
                logger.error("%s refused a reply (part %d of %d): %s", where, i + 1, len(parts), error)
            raise error from exc
