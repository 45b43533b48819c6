"""Waiting on a condition with a deadline: how tests synchronise, instead of fixed sleeps.

A sleep long enough for an idle machine is too short for a loaded one and wastes time on a
fast one; a predicate polled until a deadline is neither. The deadline only bounds a failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["until", "until_async"]


async def until(predicate: Callable[[], object], timeout: float = 60.0, *,
                what: str = "condition") -> None:
    """Return once ``predicate()`` is true; fail the test if ``timeout`` s pass first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        await asyncio.sleep(0.01)


async def until_async(predicate: Callable[[], Awaitable[object]], timeout: float = 60.0, *,
                      what: str = "condition") -> None:
    """``until`` for a predicate that must be awaited (a store read in a thread, an HTTP call)."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        await asyncio.sleep(0.02)
