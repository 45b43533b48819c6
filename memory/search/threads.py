"""The recall indexes' threads, shared by every agent of a gateway (issue 41).

Each recall index syncs in a background thread of its own and runs auto-recall queries in a
small pool. Per agent, that is a thread each that allocates: glibc gives every such thread a
malloc arena of its own, and ten agents' arenas held ~2 MB each once their first sync had
run (bench/bench_agents_idle.py: 10 idle agents +20 MB over one, +6 MB with arenas capped).
Shared, the agents' background syncs take turns on one niced thread (on a small machine they
would only compete for the same cores anyway) and their queries use one pool.

The first index to start opens the threads, the last to stop shuts them down.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["Pools", "RecallThreads"]

Pools = tuple[ThreadPoolExecutor, ThreadPoolExecutor]  # (the sync thread, the query pool)


class RecallThreads:
    """One sync thread and one query pool for several recall indexes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: Pools | None = None
        self._users = 0

    def open(self, make: Callable[[], Pools]) -> Pools:
        """The shared pools, made with ``make`` by the first index to start."""
        with self._lock:
            if self._pools is None:
                self._pools = make()
            self._users += 1
            return self._pools

    def release(self) -> list[ThreadPoolExecutor]:
        """An index stopped: the pools to shut down when it was the last one (else none)."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._pools is None:
                return []
            pools, self._pools = self._pools, None
            return list(pools)
