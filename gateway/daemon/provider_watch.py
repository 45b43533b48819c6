"""Keeps ``/readyz``'s model check honest without traffic.

``/readyz`` reports the outcome of the last model call. After a failure nothing else
would ever call the model if a load balancer stops sending traffic on that 503, so the
gateway would stay not-ready for good. While the last call failed, this watch sends one
tiny completion (``job="probe"``, one token, no retries) every ``interval_s`` seconds; the
model client records its outcome like any call, so the first answer after the provider
comes back turns the gateway ready again. While the last call succeeded it sends nothing.

``wait`` is the pause between checks (``asyncio.sleep`` by default); tests pass their own
to decide when a check happens instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from lucidgate.gateway.errors import LucidError
from lucidgate.gateway.metrics import Metrics

logger = logging.getLogger(__name__)

PROBE_INTERVAL_S = 20.0  # well inside the promised minute, a few tokens a minute at most


class Probe(Protocol):
    async def complete(self, messages: list[dict[str, object]], *, job: str, max_tokens: int | None = None,
                       retries: int | None = None) -> object: ...


class ProviderWatch:
    def __init__(self, metrics: Metrics, model: Probe, *, interval_s: float = PROBE_INTERVAL_S,
                 wait: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.metrics = metrics
        self.model = model
        self.interval_s = interval_s
        self.wait = wait
        self._task: asyncio.Task[None] | None = None

    def failing(self) -> bool:
        last = self.metrics.last_llm
        return last is not None and not last.ok

    async def check(self) -> None:
        """One probe if the last model call failed; its outcome lands in the metrics."""
        if not self.failing():
            return
        try:
            await self.model.complete([{"role": "user", "content": "ping"}], job="probe", max_tokens=1,
                                      retries=0)
        except (LucidError, OSError) as exc:  # still down: stays not-ready, the next check retries
            logger.debug("provider probe failed: %s", exc)
        if not self.failing():
            logger.info("the model provider answers again; /readyz is ready")

    async def _run(self) -> None:
        while True:
            await self.wait(self.interval_s)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the watch or the gateway
                logger.exception("provider probe crashed")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="provider-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
