"""The one retry delay (config/backoff.py): doubling, capped, jittered upwards only."""

from __future__ import annotations

import pytest

from lucidgate.config.backoff import backoff_delay


def test_doubles_per_failure_from_the_base() -> None:
    assert [backoff_delay(n, 0.5, jitter=0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(0, 0.5, jitter=0) == 0.5  # "no failure yet" waits the base, never less


def test_is_capped_even_after_a_very_long_outage() -> None:
    assert backoff_delay(5, 1.0, 10.0, jitter=0) == 10.0
    assert backoff_delay(10_000, 1.0, 300.0, jitter=0) == 300.0  # no OverflowError


@pytest.mark.parametrize("draw, expected", [(0.0, 8.0), (0.5, 9.0), (0.999, 9.998)])
def test_jitter_stretches_by_up_to_the_fraction(draw: float, expected: float) -> None:
    assert backoff_delay(4, 1.0, jitter=0.25, rand=lambda: draw) == pytest.approx(expected)
