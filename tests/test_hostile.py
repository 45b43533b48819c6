"""Hostile inputs: SSRF through webhook callbacks (DNS rebinding included), over real HTTP.

The callback sender resolves a destination once, checks every address, and connects to the
checked one with the Host header kept; a name that answers a public address to the check and
127.0.0.1 afterwards reaches nothing on loopback.
"""

from __future__ import annotations

from typing import Any

import pytest

from lucidgate.channels._netguard import Refused, resolve_checked
from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry
from lucidgate.channels.webhook.callbacks import CallbackPoster, check_callback_url
from tests.test_webhook import CallbackSink

PUBLIC = "93.184.216.34"


def poster(allow_hosts: list[str], resolver: Any, *, max_attempts: int = 3) -> CallbackPoster:
    return CallbackPoster(secret="s" * 16, allow_hosts=allow_hosts, timeout_s=5, max_attempts=max_attempts,
                          backoff_s=0.01, resolver=resolver)


async def test_dns_rebinding_cannot_reach_loopback() -> None:
    async with CallbackSink() as sink:
        port = sink.url.rsplit(":", 1)[1].split("/")[0]
        asked: list[str] = []

        async def rebinding(host: str, port_: int) -> list[str]:
            asked.append(host)  # public to the first question, loopback to any later one
            return [PUBLIC] if len(asked) == 1 else ["127.0.0.1"]

        callbacks = poster([], rebinding)
        await callbacks.start()
        try:
            with pytest.raises(DeliveryRetry) as failed:
                await callbacks.post(f"http://rebind.example:{port}/cb", b"{}", delivery_id="d1", message_id="m1")
        finally:
            await callbacks.stop()
        # The POST went to the checked public address (which the tests' network guard refuses)…
        assert PUBLIC in str(failed.value), failed.value
        assert asked == ["rebind.example"]  # …resolved once: the client never asked again
        assert sink.received == []  # nothing reached the loopback receiver


async def test_the_pinned_connection_keeps_the_host_header() -> None:
    async with CallbackSink() as sink:
        port = sink.url.rsplit(":", 1)[1].split("/")[0]
        asked: list[str] = []

        async def resolver(host: str, port_: int) -> list[str]:
            asked.append(host)
            return ["127.0.0.1"]

        callbacks = poster(["hooks.internal.test"], resolver)
        await callbacks.start()
        try:
            await callbacks.post(f"http://hooks.internal.test:{port}/cb", b"{}", delivery_id="d1", message_id="m1")
        finally:
            await callbacks.stop()
        headers = {k.lower(): v for k, v in sink.received[0]["headers"].items()}
        assert headers["host"] == f"hooks.internal.test:{port}"
        assert headers["x-lucid-delivery"] == "d1"
        assert asked == ["hooks.internal.test"]


async def test_a_refused_destination_is_dead_lettered_at_once() -> None:
    async def metadata(host: str, port_: int) -> list[str]:
        return ["169.254.169.254"]

    callbacks = poster([], metadata, max_attempts=5)
    await callbacks.start()
    try:
        with pytest.raises(DeliveryFailed) as failed:
            await callbacks.post("http://hooks.example/cb", b"{}", delivery_id="d1", message_id=None)
    finally:
        await callbacks.stop()
    assert failed.value.permanent and "link-local" in str(failed.value)


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
