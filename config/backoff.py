"""The one retry delay: exponential in the number of consecutive failures, capped, jittered.

Every retry loop in the daemon (deliveries, callbacks, LLM calls, Telegram polling, Slack
Socket Mode, MCP reconnects, the send limiter) waits ``backoff_delay(failures, base, cap)``:
``base``, ``2·base``, ``4·base``… up to ``cap``, then stretched by up to ``jitter`` (a
fraction, default a quarter) so that many clients that failed together do not retry in step.
Lives in ``config`` (the lowest layer) so that every package can use it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

# 2**40 is far past any cap: larger exponents only risk an OverflowError.
_MAX_EXPONENT = 40


def backoff_delay(failures: int, base_s: float, cap_s: float = math.inf, *, jitter: float = 0.25,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait after ``failures`` (≥ 1) consecutive failures."""
    exponent = min(max(0, failures - 1), _MAX_EXPONENT)
    return float(min(cap_s, base_s * 2 ** exponent) * (1 + jitter * rand()))
