"""Hostile inputs: SSRF through webhook callbacks (DNS rebinding included), over real HTTP.

The callback sender resolves a destination once, checks every address, and connects to the
checked one with the Host header kept; a name that answers a public address to the check and
127.0.0.1 afterwards reaches nothing on loopback.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from channels._netguard import Refused, resolve_checked
from channels.webhook.outbox import CallbackSender, check_callback_url
from channels.webhook.store import WebhookStore
from tests.test_webhook import CallbackSink

PUBLIC = "93.184.216.34"


def queued_callback(tmp_path: Path, url: str) -> WebhookStore:
    store = WebhookStore(tmp_path / "wh.sqlite")
    store.open()
    store.claim(message_id="m1", idem_key=None, fingerprint="f", session="webhook:c", chat_id="c",
                sender_id="u", callback_url=url, want_callback=True)
    _, delivery = store.finish("m1", "the answer", False)
    assert delivery is not None
    return store


def outbox_row(store: WebhookStore) -> tuple[str, int, str | None]:
    row = store._connection().execute("SELECT status, attempts, last_error FROM outbox").fetchone()
    return row[0], row[1], row[2]


async def until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_dns_rebinding_cannot_reach_loopback(tmp_path: Path) -> None:
    async with CallbackSink() as sink:
        port = sink.url.rsplit(":", 1)[1].split("/")[0]
        asked: list[str] = []

        async def rebinding(host: str, port_: int) -> list[str]:
            asked.append(host)  # public to the first question, loopback to any later one
            return [PUBLIC] if len(asked) == 1 else ["127.0.0.1"]

        store = queued_callback(tmp_path, f"http://rebind.example:{port}/cb")
        sender = CallbackSender(store, secret="s" * 16, allow_hosts=[], timeout_s=2, max_attempts=1,
                                backoff_s=0.01, resolver=rebinding)
        await sender.start()
        try:
            await until(lambda: outbox_row(store)[1] >= 1)
        finally:
            await sender.stop()
        status, _, error = outbox_row(store)
        # The POST went to the checked public address (which the tests' network guard refuses)…
        assert error is not None and PUBLIC in error, error
        assert asked == ["rebind.example"]  # …resolved once: the client never asked again
        assert sink.received == []  # nothing reached the loopback receiver
        assert status != "delivered"


async def test_the_pinned_connection_keeps_the_host_header(tmp_path: Path) -> None:
    async with CallbackSink() as sink:
        port = sink.url.rsplit(":", 1)[1].split("/")[0]
        asked: list[str] = []

        async def resolver(host: str, port_: int) -> list[str]:
            asked.append(host)
            return ["127.0.0.1"]

        store = queued_callback(tmp_path, f"http://hooks.internal.test:{port}/cb")
        sender = CallbackSender(store, secret="s" * 16, allow_hosts=["hooks.internal.test"], timeout_s=5,
                                max_attempts=3, backoff_s=0.01, resolver=resolver)
        await sender.start()
        try:
            await sink.wait_for(1, timeout=30)
        finally:
            await sender.stop()
        headers = {k.lower(): v for k, v in sink.received[0]["headers"].items()}
        assert headers["host"] == f"hooks.internal.test:{port}"
        assert asked == ["hooks.internal.test"]


@pytest.mark.parametrize("url, answer, why", [
    ("http://169.254.169.254/latest/meta-data/", None, "link-local"),
    ("http://[::1]:8080/cb", None, "loopback"),
    ("http://[::ffff:127.0.0.1]/cb", None, "loopback"),
    ("http://10.1.2.3/cb", None, "private"),
    ("http://metadata.example/cb", ["169.254.169.254"], "link-local"),
    ("http://mixed.example/cb", [PUBLIC, "192.168.1.7"], "private"),
    ("http://zero.example/cb", ["0.0.0.0"], "address"),
    ("file:///etc/passwd", None, "http"),
    ("http://user:pw@example.com/cb", None, "credentials"),
    ("http://" + "a" * 3000 + ".com/", None, "longer"),
])
async def test_private_destinations_are_refused(url: str, answer: list[str] | None, why: str) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        assert answer is not None, "a literal address is never resolved"
        return answer

    reason = await check_callback_url(url, [], resolver=resolver)
    assert reason is not None and why in reason
    with pytest.raises(Refused):
        await resolve_checked(url, [], resolver=resolver)


async def test_a_public_destination_is_pinned_to_the_checked_address() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return [PUBLIC]

    dest = await resolve_checked("https://hooks.example.com/cb", [], resolver=resolver)
    assert (dest.host, dest.port, dest.ip) == ("hooks.example.com", 443, PUBLIC)
