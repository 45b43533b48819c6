"""``send_parts``: a split reply's retry resumes at the part the platform has not accepted yet."""

from __future__ import annotations

import logging

import pytest

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry
from lucidgate.channels.parts import DeliveryError, send_parts


class PlatformDown(Exception):
    """What a platform SDK raises for an outage."""


class PlatformRefuses(Exception):
    """What a platform SDK raises for a chat that is gone."""


def as_delivery_error(exc: Exception) -> DeliveryError | None:
    if isinstance(exc, PlatformRefuses):
        return DeliveryFailed(str(exc), permanent=True)
    if isinstance(exc, PlatformDown):
        return DeliveryRetry(str(exc))
    return None


class Platform:
    """Accepts parts until the one that fails; records what it accepted."""

    def __init__(self, fail_at: int | None = None, error: Exception | None = None) -> None:
        self.accepted: list[str] = []
        self.fail_at, self.error = fail_at, error

    async def send_one(self, i: int, part: str) -> None:
        if i == self.fail_at and self.error is not None:
            raise self.error
        self.accepted.append(part)


PARTS = ["one", "two", "three"]


async def test_an_outage_says_how_many_parts_went_out_and_the_retry_sends_only_the_rest() -> None:
    first = Platform(fail_at=1, error=PlatformDown("503"))
    with pytest.raises(DeliveryRetry) as raised:
        await send_parts(PARTS, first.send_one, skip=0, failure=as_delivery_error, where="chat 1")
    assert first.accepted == ["one"] and raised.value.parts_done == 1
    assert isinstance(raised.value.__cause__, PlatformDown)
    retry = Platform()
    await send_parts(PARTS, retry.send_one, skip=raised.value.parts_done, failure=as_delivery_error, where="chat 1")
    assert retry.accepted == ["two", "three"]  # the chat shows each part once


async def test_a_refusal_for_good_is_permanent_and_logged_with_its_part(caplog: pytest.LogCaptureFixture) -> None:
    platform = Platform(fail_at=2, error=PlatformRefuses("chat not found"))
    with caplog.at_level(logging.ERROR, logger="lucidgate.channels.parts"), pytest.raises(DeliveryFailed) as raised:
        await send_parts(PARTS, platform.send_one, skip=1, failure=as_delivery_error, where="Test chat 7")
    assert raised.value.permanent and raised.value.parts_done == 2 and platform.accepted == ["two"]
    assert "Test chat 7 refused a reply (part 3 of 3): chat not found" in caplog.text


async def test_the_limiters_typed_errors_get_the_count_and_other_errors_pass_unchanged() -> None:
    limited = Platform(fail_at=1, error=DeliveryRetry("429", after_s=5))
    with pytest.raises(DeliveryRetry) as raised:
        await send_parts(PARTS, limited.send_one, skip=0, failure=as_delivery_error, where="chat 1")
    assert raised.value.parts_done == 1 and raised.value.after_s == 5
    broken = Platform(fail_at=0, error=KeyError("a bug of ours"))
    with pytest.raises(KeyError):
        await send_parts(PARTS, broken.send_one, skip=0, failure=as_delivery_error, where="chat 1")
