"""Delivering webhook answers to ``callback_url``: SSRF checks, HMAC signing, retries.

Callbacks are read from the durable outbox (``WebhookStore``), so a delivery that is
pending at a restart is resumed. Each POST is signed:

    X-Lucid-Timestamp: <unix seconds>
    X-Lucid-Signature: sha256=<hex HMAC-SHA256(callbackSecret, f"{timestamp}.{body}")>
    X-Lucid-Delivery:  <delivery id, the same on every retry — receivers dedupe on it>

The destination is resolved once per attempt and checked (``channels._netguard``), and
the POST connects to that checked address with the Host header and SNI kept, so a name
that answers a public address to the check and 127.0.0.1 to the client (DNS rebinding)
reaches nothing private. A non-2xx answer, a timeout or a connection error is retried with exponential backoff;
after ``callbackMaxAttempts`` the delivery is given up with one warning. Redirects are not
followed (they would bypass the address check), and the destination is checked again at
delivery time, not only when the request was accepted.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import random
import time
from collections.abc import Collection
from urllib.parse import urlsplit

import httpx

from channels._netguard import (
    RESOLVE_TIMEOUT_S,
    Destination,
    Refused,
    Resolver,
    Unresolved,
    pin,
    resolve_checked,
)
from channels.webhook.store import Delivery, WebhookStore

logger = logging.getLogger(__name__)



def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def url_host(url: str) -> str:
    """``scheme://host[:port]`` of a URL, for log lines (paths and queries may hold secrets)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


# A name that does not resolve *now* may resolve in a minute: retried, unlike a refusal.
UNRESOLVED = "cannot be resolved"


async def check_callback_url(url: str, allow_hosts: Collection[str], *,
                             resolver: Resolver | None = None) -> str | None:
    """Why ``url`` may not receive callbacks, or None when it may (``channels._netguard``).

    Private, loopback and link-local destinations are refused (every address the name
    resolves to is checked) unless the host is listed in ``callbackAllowHosts``.
    """
    try:
        await resolve_checked(url, allow_hosts, resolver=resolver)
    except Refused as exc:
        return f"callback_url: {exc} (see callbackAllowHosts)"
    except Unresolved as exc:
        return f"callback_url: {exc}"
    return None


class CallbackSender:
    """Drains the outbox: one task that sleeps until the next delivery is due or it is woken."""

    def __init__(self, store: WebhookStore, *, secret: str, allow_hosts: Collection[str],
                 timeout_s: float, max_attempts: int, backoff_s: float, max_backoff_s: float = 600.0,
                 concurrency: int = 8, resolver: Resolver | None = None) -> None:
        self.store = store
        self._resolver = resolver
        self._secret = secret
        self._allow_hosts = list(allow_hosts)
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._concurrency = concurrency
        self._wakeup = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self.delivered = 0
        self.given_up = 0

    async def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=self._timeout_s, follow_redirects=False, trust_env=False)
        self._task = asyncio.create_task(self._run(), name="webhook-outbox")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._inflight) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def wake(self) -> None:
        self._wakeup.set()

    async def idle(self) -> None:
        """Wait for the attempts in flight now (not for later retries)."""
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def flush(self) -> None:
        """Shutdown: one attempt for every delivery due now; what fails waits for the next start."""
        if self._client is None:
            return
        await self._spawn(await asyncio.to_thread(self.store.lease_due, limit=1000, lease_s=self._lease_s))
        await self.idle()

    @property
    def _lease_s(self) -> float:
        return self._timeout_s + RESOLVE_TIMEOUT_S + 30

    async def _spawn(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            task = asyncio.create_task(self._deliver(delivery), name=f"callback-{delivery.delivery_id}")
            self._inflight.add(task)
            task.add_done_callback(self._finished)

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            timeout: float | None = None
            try:
                room = self._concurrency - len(self._inflight)
                if room > 0:
                    await self._spawn(await asyncio.to_thread(self.store.lease_due, limit=room,
                                                              lease_s=self._lease_s))
                if len(self._inflight) < self._concurrency:
                    next_at = await asyncio.to_thread(self.store.next_due)
                    if next_at is not None:
                        timeout = max(0.0, next_at - self.store.now())
            except Exception:  # e.g. the disk is full: keep the worker, try again shortly
                logger.exception("webhook: reading the callback outbox failed")
                timeout = 5.0
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._wakeup.set()

    async def _deliver(self, d: Delivery) -> None:
        try:
            await self._attempt(d)
        except asyncio.CancelledError:
            raise
        except Exception:  # the lease expires and the delivery is tried again
            logger.exception("webhook: callback %s failed unexpectedly", d.delivery_id)

    async def _attempt(self, d: Delivery) -> None:
        where = url_host(d.url)
        # Resolved and checked once, here; the POST goes to that very address (no rebinding).
        try:
            dest = await resolve_checked(d.url, self._allow_hosts, resolver=self._resolver)
        except Refused as exc:
            await asyncio.to_thread(self.store.attempt_failed, d.delivery_id, str(exc), None)
            self.given_up += 1
            logger.warning("webhook: callback %s to %s refused: %s", d.delivery_id, where, exc)
            return
        except Unresolved as exc:
            await self._retry_or_give_up(d, str(exc), where)
            return
        error = await self._post(d, dest)
        if error is None:
            await asyncio.to_thread(self.store.delivered, d.delivery_id)
            self.delivered += 1
            logger.debug("webhook: callback %s delivered to %s", d.delivery_id, where)
            return
        await self._retry_or_give_up(d, error, where)

    async def _post(self, d: Delivery, dest: Destination) -> str | None:
        """POST the signed body to the pinned address; None on a 2xx, else what went wrong."""
        body = d.body.encode("utf-8")
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "lucidgate-webhook",
            "X-Lucid-Timestamp": timestamp,
            "X-Lucid-Signature": sign(self._secret, timestamp, body),
            "X-Lucid-Delivery": d.delivery_id,
        }
        assert self._client is not None
        try:
            request = pin(self._client.build_request("POST", d.url, content=body, headers=headers), dest)
            response = await self._client.send(request, follow_redirects=False)
            return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        except (httpx.HTTPError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except Exception as exc:  # e.g. an ExceptionGroup out of the connection pool: retried
            return f"{type(exc).__name__}: {exc!r}"

    async def _retry_or_give_up(self, d: Delivery, error: str, where: str) -> None:
        attempts = d.attempts + 1
        if attempts >= self._max_attempts:
            await asyncio.to_thread(self.store.attempt_failed, d.delivery_id, error, None)
            self.given_up += 1
            logger.warning("webhook: gave up delivering callback %s (message %s) to %s after %d attempts; "
                           "last error: %s", d.delivery_id, d.message_id, where, attempts, error)
            return
        delay = min(self._max_backoff_s, self._backoff_s * 2 ** (attempts - 1)) * (1 + random.random() / 4)
        await asyncio.to_thread(self.store.attempt_failed, d.delivery_id, error, delay)
        logger.info("webhook: callback %s to %s failed (%s); attempt %d/%d, retrying in %.1fs",
                    d.delivery_id, where, error, attempts, self._max_attempts, delay)
