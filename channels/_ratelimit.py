"""The outbound limiter a platform channel sends through (one per channel, shared by all).

Every session and job of a channel shares one limiter, so a burst of replies is paced
below the platform's flood limits instead of being rejected. Pacing is a GCRA ("virtual
scheduling") per scope: one global rate plus one per chat, each allowing a small burst.

Failures are classified by the platform adapter (``classify``), because only it knows its
SDK's exceptions:

* ``Verdict.wait(s)`` — the platform said "retry after s seconds" (HTTP 429): the whole
  channel pauses that long and the same send is retried;
* ``Verdict.retry()`` — the request certainly did not take effect (connection refused,
  a 5xx): retried with backoff, a bounded number of times;
* ``Verdict.uncertain()`` — it timed out: it may have been delivered, so it is *not*
  resent (that would double-post); ``DeliveryUncertain`` is raised for the caller to log;
* ``Verdict.fail()`` — anything else: the original exception propagates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from lucidgate.config.backoff import backoff_delay
from lucidgate.config.errors import LucidError

logger = logging.getLogger(__name__)

T = TypeVar("T")


class DeliveryRetry(LucidError):
    """A transient failure the outbox retries: after ``after_s`` (a 429's retry_after) or, when
    None, after its own exponential backoff. ``parts_done`` counts the parts of a split reply the
    platform already accepted, so a retry starts at the next part."""

    def __init__(self, message: str, *, after_s: float | None = None, parts_done: int = 0) -> None:
        super().__init__(message)
        self.after_s = after_s
        self.parts_done = parts_done


class DeliveryUncertain(DeliveryRetry):
    """A send timed out; it may or may not have arrived. The limiter does not resend it at
    once; the outbox retries it later (at-least-once: a duplicate beats a lost reply)."""


class DeliveryFailed(LucidError):
    """A send was given up. ``permanent``: the platform refused it for good (chat not found,
    bot blocked, invalid payload) — the outbox dead-letters it; otherwise it is retried."""

    def __init__(self, message: str, *, permanent: bool = False, parts_done: int = 0,
                 after_s: float | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.parts_done = parts_done
        self.after_s = after_s


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Literal["wait", "retry", "uncertain", "fail"]
    delay: float = 0.0

    @classmethod
    def wait(cls, seconds: float) -> Verdict:
        return cls("wait", max(0.0, float(seconds)))

    @classmethod
    def retry(cls) -> Verdict:
        return cls("retry")

    @classmethod
    def uncertain(cls) -> Verdict:
        return cls("uncertain")

    @classmethod
    def fail(cls) -> Verdict:
        return cls("fail")


Classifier = Callable[[BaseException], Verdict]


class _Gcra:
    """Theoretical-arrival-time pacing: ``rate`` per second with ``burst`` back-to-back."""

    __slots__ = ("interval", "tolerance", "tat")

    def __init__(self, rate: float, burst: int) -> None:
        self.interval = 1.0 / rate
        self.tolerance = self.interval * max(0, burst - 1)
        self.tat = 0.0

    def earliest(self, now: float) -> float:
        return max(now, self.tat - self.tolerance)

    def take(self, at: float) -> None:
        self.tat = max(self.tat, at) + self.interval


class OutboundLimiter:
    """Paces and retries sends for one channel. ``run(key, call)`` is the only entry point."""

    def __init__(
        self,
        name: str,
        classify: Classifier,
        *,
        rate_per_s: float = 25.0,
        burst: int = 20,
        per_key_rate_per_s: float = 1.0,
        per_key_burst: int = 3,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        max_wait_s: float = 300.0,
    ) -> None:
        self.name = name
        self._classify = classify
        self._global = _Gcra(rate_per_s, burst)
        self._per_key: dict[str, _Gcra] = {}
        self._key_rate = (per_key_rate_per_s, per_key_burst)
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._max_wait_s = max_wait_s
        self._paused_until = 0.0
        self._lock = asyncio.Lock()
        self.waits: list[float] = []  # retry-after waits honoured (metrics, tests)

    async def run(self, key: str | None, call: Callable[[], Awaitable[T]], *, what: str = "send") -> T:
        """Run ``call`` when the pacing allows; retry it as its failure's verdict says."""
        attempt = 0
        while True:
            attempt += 1
            await self._slot(key)
            try:
                return await call()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                verdict = self._classify(exc)
                if verdict.action == "uncertain":
                    logger.warning(
                        "%s: %s to %s timed out; not resending at once (it may have been delivered)",
                        self.name, what, key,
                    )
                    raise DeliveryUncertain(f"{what} timed out") from exc
                if verdict.action == "fail":
                    raise
                if attempt >= self._max_attempts:
                    raise DeliveryFailed(f"{what} failed after {attempt} attempts: {exc}") from exc
                if verdict.action == "wait":
                    if verdict.delay > self._max_wait_s:
                        raise DeliveryFailed(
                            f"{what}: the platform asked to wait {verdict.delay:.0f}s; giving up for now",
                            after_s=verdict.delay,
                        ) from exc
                    logger.info("%s: rate limited; waiting %.1fs before retrying", self.name, verdict.delay)
                    self.waits.append(verdict.delay)
                    self._paused_until = max(self._paused_until, time.monotonic() + verdict.delay)
                else:
                    delay = backoff_delay(attempt, self._backoff_s)
                    logger.info("%s: %s failed (%s); retrying in %.1fs", self.name, what, exc, delay)
                    await asyncio.sleep(delay)

    async def _slot(self, key: str | None) -> None:
        """Wait for the chat's own slot first, then for a global one.

        In two steps so a chat that must wait never holds up other chats' global slots.
        """
        if key is not None:
            async with self._lock:
                now = time.monotonic()
                bucket = self._per_key.get(key)
                if bucket is None:
                    if len(self._per_key) > 10_000:
                        self._forget_idle(now)
                    bucket = self._per_key[key] = _Gcra(*self._key_rate)
                at = bucket.earliest(now)
                bucket.take(at)
            await self._sleep_until(at)
        async with self._lock:
            now = time.monotonic()
            at = max(self._global.earliest(now), self._paused_until)
            self._global.take(at)
        await self._sleep_until(at)

    @staticmethod
    async def _sleep_until(at: float) -> None:
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def _forget_idle(self, now: float) -> None:
        for k in [k for k, b in self._per_key.items() if b.tat < now]:
            del self._per_key[k]
