"""Delivering webhook answers to ``callback_url``: SSRF checks, HMAC signing, retry verdicts.

A callback is one attempt of the gateway's durable outbox (``channels.outbox``): the answer
is recorded there before the first POST, and the outbox's lane for the chat retries it, in
order, across restarts. This module makes one attempt and says what should happen next by
raising the outbox's typed errors. Each POST is signed:

    X-Lucid-Timestamp: <unix seconds>
    X-Lucid-Signature: sha256=<hex HMAC-SHA256(callbackSecret, f"{timestamp}.{body}")>
    X-Lucid-Delivery:  <delivery id, the same on every retry — receivers dedupe on it>

The destination is resolved once per attempt and checked (``channels._netguard``), and
the POST connects to that checked address with the Host header and SNI kept, so a name
that answers a public address to the check and 127.0.0.1 to the client (DNS rebinding)
reaches nothing private. A non-2xx answer, a timeout or a connection error is retried with
exponential backoff from ``callbackBackoffS`` (a 429's ``Retry-After`` is honoured); after
``callbackMaxAttempts`` attempts in this process, or at the channel's delivery deadline, the
item is dead-lettered with one warning. A destination that is refused (private, loopback,
metadata) is dead-lettered at once. Redirects are not followed (they would bypass the
address check), and the destination is checked at every attempt, not only when the request
was accepted.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Collection
from typing import NoReturn
from urllib.parse import urlsplit

import httpx

from lucidgate.channels._netguard import (
    Destination,
    Refused,
    Resolver,
    Unresolved,
    pin,
    resolve_checked,
)
from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import OutboundError, OutboundText, Target
from lucidgate.channels.webhook.api import CHANNEL
from lucidgate.channels.webhook.store import WebhookStore
from lucidgate.config.backoff import backoff_delay

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


class CallbackPoster:
    """One signed POST per call; the outbox's lane decides when the next one happens."""

    def __init__(self, *, secret: str, allow_hosts: Collection[str], timeout_s: float, max_attempts: int,
                 backoff_s: float, max_backoff_s: float = 600.0, resolver: Resolver | None = None) -> None:
        self._resolver = resolver
        self._secret = secret
        self._allow_hosts = list(allow_hosts)
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._client: httpx.AsyncClient | None = None
        # Failed attempts per delivery id in this process (a restart starts counting again;
        # the outbox's deadline bounds the total).
        self._failures: dict[str, int] = {}
        self.delivered = 0
        self.given_up = 0

    async def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=self._timeout_s, follow_redirects=False, trust_env=False)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(self, url: str, body: bytes, *, delivery_id: str, message_id: str | None) -> None:
        """Deliver ``body`` or raise ``DeliveryRetry`` (try again later) / ``DeliveryFailed``."""
        if self._client is None:
            raise DeliveryRetry("the webhook channel is not running")
        where = url_host(url)
        # Resolved and checked once, here; the POST goes to that very address (no rebinding).
        try:
            dest = await resolve_checked(url, self._allow_hosts, resolver=self._resolver)
        except Refused as exc:
            self._failures.pop(delivery_id, None)
            self.given_up += 1
            raise DeliveryFailed(f"callback {delivery_id} to {where} refused: {exc}", permanent=True) from None
        except Unresolved as exc:
            self._retry_or_give_up(delivery_id, message_id, str(exc), where, None)
        error, after_s = await self._post(self._client, url, body, delivery_id, dest)
        if error is None:
            self._failures.pop(delivery_id, None)
            self.delivered += 1
            logger.debug("webhook: callback %s delivered to %s", delivery_id, where)
            return
        self._retry_or_give_up(delivery_id, message_id, error, where, after_s)

    async def _post(self, client: httpx.AsyncClient, url: str, body: bytes, delivery_id: str,
                    dest: Destination) -> tuple[str | None, float | None]:
        """POST the signed body to the pinned address: (None, None) on a 2xx, else (what went
        wrong, the receiver's Retry-After in seconds if it gave one)."""
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "lucidgate-webhook",
            "X-Lucid-Timestamp": timestamp,
            "X-Lucid-Signature": sign(self._secret, timestamp, body),
            "X-Lucid-Delivery": delivery_id,
        }
        try:
            request = pin(client.build_request("POST", url, content=body, headers=headers), dest)
            response = await client.send(request, follow_redirects=False)
        except (httpx.HTTPError, OSError) as exc:
            return (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__), None
        except Exception as exc:  # e.g. an ExceptionGroup out of the connection pool: retried
            return f"{type(exc).__name__}: {exc!r}", None
        if 200 <= response.status_code < 300:
            return None, None
        return f"HTTP {response.status_code}", retry_after_s(response.headers.get("retry-after"))

    def _retry_or_give_up(self, delivery_id: str, message_id: str | None, error: str, where: str,
                          after_s: float | None) -> NoReturn:
        failures = self._failures.get(delivery_id, 0) + 1
        if failures >= self._max_attempts:  # the outbox dead-letters it with one warning line
            self._failures.pop(delivery_id, None)
            self.given_up += 1
            raise DeliveryFailed(f"callback {delivery_id} (message {message_id}) to {where} gave up after "
                                 f"{failures} attempts; last error: {error}", permanent=True)
        self._failures[delivery_id] = failures
        if after_s is None:
            after_s = backoff_delay(failures, self._backoff_s, self._max_backoff_s)
        logger.info("webhook: callback %s to %s failed (%s); attempt %d/%d, retrying in %.1fs",
                    delivery_id, where, error, failures, self._max_attempts, after_s)
        raise DeliveryRetry(f"callback to {where}: {error}", after_s=after_s)


def retry_after_s(value: str | None, *, cap_s: float = 3600.0) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds only; an HTTP date is ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(seconds, 0.0), cap_s) if seconds == seconds else None


async def adopt_legacy_callbacks(store: WebhookStore, bus: MessageBus) -> None:
    """Callbacks an earlier version left pending in its own table go to the outbox once."""
    try:
        legacy = await asyncio.to_thread(store.take_legacy_deliveries)
    except Exception:
        logger.exception("webhook: reading the old callback table failed; it is left as it was")
        return
    for old in legacy:
        target = Target(CHANNEL, old.chat_id)
        if old.message_id is not None:
            await asyncio.to_thread(store.want_callback_to, old.message_id, old.url)
        cls = OutboundError if old.is_error else OutboundText
        await bus.publish_outbound(cls(target, old.reply, in_reply_to=old.message_id))
    if legacy:
        logger.info("webhook: moved %d pending callback(s) into the outbox", len(legacy))
