"""Watching the agent loop's long-lived tasks, so a dead one is seen rather than silent.

The consumer (bus → session workers) and the resumer (interrupted turns at start) run for the
gateway's life. If one ends with an exception, or is cancelled by anything but the loop's own
``stop``, messages would still be journalled but never answered. ``TaskWatch`` logs such a
death with its traceback the moment it happens and remembers it, so ``/readyz`` reports the
loop not-ready for as long as the process lives (a restart is the cure).

A task that ends normally is fine if it is allowed to (``may_finish``: the resumer finishes
once every interrupted turn is queued).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)


class TaskWatch:
    """Done-callbacks on named tasks; ``healthy`` says whether every watched task is alive."""

    def __init__(self) -> None:
        self._dead: dict[str, str] = {}  # task name -> what happened to it
        self._stopping = False

    def watch(self, task: asyncio.Task[Any], *, may_finish: bool = False) -> None:
        def done(finished: asyncio.Task[Any]) -> None:
            self._check(finished, may_finish)

        task.add_done_callback(done)

    def stopping(self) -> None:
        """From here on, watched tasks end because the owner stops them: not a death."""
        self._stopping = True

    def healthy(self) -> tuple[bool, str]:
        if not self._dead:
            return True, "running"
        return False, "; ".join(f"{name} {what}" for name, what in sorted(self._dead.items()))

    def _check(self, task: asyncio.Task[Any], may_finish: bool) -> None:
        name = task.get_name()
        if task.cancelled():
            if self._stopping:
                return
            self._dead[name] = "was cancelled"
            logger.error("%s was cancelled while the gateway runs; the agent loop is not ready "
                         "until a restart", name)
            return
        exc = task.exception()
        if exc is not None:
            self._dead[name] = f"died: {type(exc).__name__}: {exc}"
            logger.error("%s died; the agent loop is not ready until a restart", name,
                         exc_info=(type(exc), exc, exc.__traceback__))
        elif not may_finish and not self._stopping:
            self._dead[name] = "ended"
            logger.error("%s ended while the gateway runs; the agent loop is not ready until a restart",
                         name)
