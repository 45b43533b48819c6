"""Delivering webhook answers to ``callback_url``: SSRF checks, HMAC signing, retries.

Callbacks are read from the durable outbox (``WebhookStore``), so a delivery that is
pending at a restart is resumed. Each POST is signed:

    X-Lucid-Timestamp: <unix seconds>
    X-Lucid-Signature: sha256=<hex HMAC-SHA256(callbackSecret, f"{timestamp}.{body}")>
    X-Lucid-Delivery:  <delivery id, the same on every retry — receivers dedupe on it>

A non-2xx answer, a timeout or a connection error is retried with exponential backoff;
after ``callbackMaxAttempts`` the delivery is given up with one warning. Redirects are not
followed (they would bypass the address check), and the destination is checked again at
delivery time, not only when the request was accepted.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Collection
from urllib.parse import urlsplit

import httpx

from channels.webhook.store import Delivery, WebhookStore

logger = logging.getLogger(__name__)

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_S = 5.0


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _ip_refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_private:
        return "a private address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved or not ip.is_global:
        return "not a public address"
    return None


def url_host(url: str) -> str:
    """``scheme://host[:port]`` of a URL, for log lines (paths and queries may hold secrets)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


# A name that does not resolve *now* may resolve in a minute: retried, unlike a refusal.
UNRESOLVED = "cannot be resolved"


async def check_callback_url(url: str, allow_hosts: Collection[str]) -> str | None:
    """Why ``url`` may not receive callbacks, or None when it may.

    Private, loopback and link-local destinations are refused (every address the name
    resolves to is checked) unless the host is listed in ``callbackAllowHosts``.
    """
    if len(url) > MAX_URL_LENGTH:
        return f"callback_url is longer than {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"callback_url is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "callback_url must be an http:// or https:// URL"
    host = parts.hostname
    if not host:
        return "callback_url has no host"
    if parts.username is not None or parts.password is not None:
        return "callback_url must not contain credentials; use the signature to authenticate"
    if host.lower() in {h.lower() for h in allow_hosts}:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        reason = _ip_refusal(ip)
        return None if reason is None else f"callback_url host {host} is {reason} (see callbackAllowHosts)"
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM),
            RESOLVE_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        return f"callback_url host {host} {UNRESOLVED} ({type(exc).__name__})"
    for info in infos:
        reason = _ip_refusal(ipaddress.ip_address(info[4][0]))
        if reason is not None:
            return f"callback_url host {host} resolves to {reason} (see callbackAllowHosts)"
    return None


class CallbackSender:
    """Drains the outbox: one task that sleeps until the next delivery is due or it is woken."""

    def __init__(self, store: WebhookStore, *, secret: str, allow_hosts: Collection[str],
                 timeout_s: float, max_attempts: int, backoff_s: float, max_backoff_s: float = 600.0,
                 concurrency: int = 8) -> None:
        self.store = store
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
        reason = await check_callback_url(d.url, self._allow_hosts)
        if reason is not None and UNRESOLVED not in reason:
            await asyncio.to_thread(self.store.attempt_failed, d.delivery_id, reason, None)
            self.given_up += 1
            logger.warning("webhook: callback %s to %s refused: %s", d.delivery_id, where, reason)
            return
        error = reason or await self._post(d)
        if error is None:
            await asyncio.to_thread(self.store.delivered, d.delivery_id)
            self.delivered += 1
            logger.debug("webhook: callback %s delivered to %s", d.delivery_id, where)
            return
        await self._retry_or_give_up(d, error, where)

    async def _post(self, d: Delivery) -> str | None:
        """POST the signed body; None on a 2xx, else what went wrong."""
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
            response = await self._client.post(d.url, content=body, headers=headers)
            return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

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
