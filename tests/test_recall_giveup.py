"""Auto-recall runs on its own executor and stops once its caller gives up: a recall stuck
behind the index lock neither occupies the default executor (session and inbox fsyncs use it)
nor goes on taking the index's lock after its timeout."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lucidgate.memory.search.hits import Scope
from lucidgate.memory.search.index import MemoryIndex
from lucidgate.memory.search.service import RecallService
from tests.search_kit import write_corpus


class _CountingLock:
    """The index's RLock, counting acquisitions by the recall thread after a mark."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.after_mark: int | None = None

    def __enter__(self) -> None:
        self.inner.acquire()
        if self.after_mark is not None and threading.current_thread().name.startswith("recall-query"):
            self.after_mark += 1

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


async def test_a_recall_whose_caller_gave_up_frees_the_default_executor_and_stops(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    service = RecallService(MemoryIndex(tmp_path, embedder=None), watch=False)
    lock = _CountingLock(service.index._lock)
    service.index._lock = lock  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1, thread_name_prefix="default"))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # e.g. a long background sync
        with lock.inner:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait()
        hits = await service.recall("Clara birthday", scope=Scope(), k=3, min_score=0.0, timeout_s=0.2)
        assert hits == []  # timed out behind the lock: no hits, no error
        lock.after_mark = 0
        # The default executor's only thread is free: the stuck recall is not on it.
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 5) == "free"
    finally:
        release.set()
        holder.join()
    pool, service._recall_pool = service._recall_pool, None  # the next recall opens a new one
    assert pool is not None
    await asyncio.wait_for(asyncio.to_thread(pool.shutdown, wait=True), 10)  # the stuck job has ended
    assert lock.after_mark is not None and lock.after_mark <= 1  # only the step it was blocked in
    found = await service.recall("Clara birthday", scope=Scope(), k=3, min_score=0.0, timeout_s=10)
    assert found and "Clara" in found[0].text  # a recall that is waited for still works
    await service.stop()
