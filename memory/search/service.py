"""RecallService: the recall index as a long-lived gateway part, always off the event loop.

- ``start`` launches two named tasks: a *syncer* that waits for "something changed" and
  runs a full sync (files, then embeddings) in a worker thread, and a *watcher* that sets
  that flag from ``watchfiles`` events on the memory sources (debounced). The first sync
  starts ``start_delay_s`` after start, so a fresh or deleted index fills in the
  background without competing with the first turns.
- ``search`` runs a cheap file-level sync first when something is marked dirty (a "lazy
  sync": new history lines are findable at once, even before their embeddings exist), then
  queries, both in a worker thread.
- ``recall`` is ``search`` for auto-recall with vectors only when the local model is
  loaded and idle, bounded by a short timeout and never raising, so neither indexing nor
  a model can hold up or fail a turn for long. It runs on its own small executor (not
  the default one that session and inbox fsyncs use), and when its caller gives up (the
  timeout, or the turn cancelled) the work stops at its next step: it takes the index's
  locks no more and leaves a lazy sync to the background syncer.

Background syncs run on one dedicated thread with a raised nice value (Linux threads have
their own), so building the index right after start, or embedding a large import, takes
CPU only when turns don't need it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Collection
from pathlib import Path

from lucidgate.config.schema import Config
from lucidgate.memory.search.configured import Embedders, open_index
from lucidgate.memory.search.index import MemoryIndex
from lucidgate.memory.search.hits import Hit, Scope, SearchSettings
from lucidgate.memory.search.sources import source_of
from lucidgate.memory.search.threads import RecallThreads
from lucidgate.memory.search.watch_hub import WatchHub

logger = logging.getLogger(__name__)

__all__ = ["RecallService", "make_recall_service"]

RECALL_THREADS = 4


class RecallService:
    def __init__(self, index: MemoryIndex, *, settings: SearchSettings = SearchSettings(),
                 watch: bool = True, debounce_ms: int = 800, max_results: int = 6,
                 start_delay_s: float = 10.0, settle_s: float = 60.0, hub: WatchHub | None = None,
                 threads: RecallThreads | None = None) -> None:
        """``hub``, ``threads``: the watcher and the threads this index shares with the other
        agents' (else its own)."""
        self.index = index
        self.hub = hub
        self.threads = threads
        self.settings = settings
        self.watch = watch
        self.debounce_ms = debounce_ms
        self.max_results = max_results
        # The first background sync waits this long: the gateway's first turns (imports,
        # first LLM call) get the CPU; searches meanwhile sync the files themselves.
        self.start_delay_s = start_delay_s
        # A half-written turn's transcript window is embedded once the turn is done, or once
        # its file has been quiet this long (``MemoryIndex.embed_missing``).
        self.settle_s = settle_s
        # How long a turn waits for auto-recall before going on without it.
        self.recall_timeout_s = 1.5
        self._settle_timer: asyncio.TimerHandle | None = None
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._dirty = True
        self._tasks: list[asyncio.Task[None]] = []
        self.synced = asyncio.Event()  # set after each completed background sync
        self._executor: ThreadPoolExecutor | None = None
        self._recall_pool: ThreadPoolExecutor | None = None
        self._files_pending = False

    @property
    def workspace(self) -> Path:
        return self.index.workspace

    def mark_dirty(self) -> None:
        self._dirty = True
        self._changed.set()

    async def start(self) -> None:
        self._stop.clear()
        self.index.cancel.clear()
        if self.threads is not None:
            self._executor, self._recall_pool = self.threads.open(_pools)
        else:
            self._executor, self._recall_pool = _pools()
        self._changed.set()
        self._tasks.append(asyncio.create_task(self._syncer(), name="recall-sync"))
        if self.watch and self.hub is not None:
            self.hub.add(self.workspace, self._relevant, self.mark_dirty, self._watch_failed)
        elif self.watch:
            self._tasks.append(asyncio.create_task(self._watcher(), name="recall-watch"))

    @property
    def stopping(self) -> bool:
        """``stop`` has begun: the index is closing, so a new search would fail."""
        return self._stop.is_set()

    async def stop(self) -> None:
        self._stop.set()
        if self.hub is not None:
            await self.hub.remove(self.workspace)
        if self._settle_timer is not None:
            self._settle_timer.cancel()
        self.index.cancel.set()  # a running sync stops after its current file or batch
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        pools = [self._executor, self._recall_pool] if self.threads is None else self.threads.release()
        for pool in pools:
            if pool is not None:
                await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
        self._executor = self._recall_pool = None
        await asyncio.to_thread(self.index.close)

    async def _syncer(self) -> None:
        if self.start_delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.start_delay_s)
        while not self._stop.is_set():
            await self._changed.wait()
            self._changed.clear()
            self._dirty = False
            self._files_pending = True  # until phase 1 is done a search syncs (waits) itself
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._sync_all)
            except Exception:
                logger.exception("recall index: background sync failed; will retry on the next change")
            if self.index.settling:  # come back for them even if nothing else changes
                if self._settle_timer is not None:
                    self._settle_timer.cancel()
                self._settle_timer = asyncio.get_running_loop().call_later(
                    self.settle_s, self._changed.set)
            self.synced.set()

    def _sync_all(self) -> None:
        if self._stop.is_set():  # queued on a shared thread behind another agent's sync
            return
        try:
            self.index.sync_files()
        finally:
            self._files_pending = False
        self.index.embed_missing(settle_s=self.settle_s)

    @staticmethod
    def _relevant(rel: str) -> bool:
        """A workspace-relative path whose change the index must see."""
        return source_of(rel) is not None or rel in ("state/owner_sessions.json", "state/forgotten.json")

    def _watch_failed(self, exc: Exception) -> None:
        self.watch = False

    async def _watcher(self) -> None:
        import watchfiles

        workspace = self.workspace

        def relevant(_change: watchfiles.Change, path: str) -> bool:
            try:
                rel = Path(path).relative_to(workspace).as_posix()
            except ValueError:
                return False
            return self._relevant(rel)

        try:
            async for _changes in watchfiles.awatch(workspace, watch_filter=relevant,
                                                    debounce=self.debounce_ms,
                                                    stop_event=self._stop):
                self.mark_dirty()
        except Exception as exc:  # e.g. inotify limits: searches still sync lazily
            logger.warning("recall index: file watcher stopped (%s); syncing before searches only",
                           exc)
            self.watch = False

    async def search(self, query: str, *, scope: Scope = Scope(), k: int | None = None,
                     sources: Collection[str] | None = None, lazy_sync: bool = True,
                     vectors_if_ready: bool = False) -> list[Hit]:
        """Raises ``SearchError`` for an empty query."""
        return await asyncio.to_thread(self._query_job(query, scope=scope, k=k, sources=sources,
                                                       lazy_sync=lazy_sync,
                                                       vectors_if_ready=vectors_if_ready))

    def _query_job(self, query: str, *, scope: Scope, k: int | None, sources: Collection[str] | None,
                   lazy_sync: bool, vectors_if_ready: bool,
                   gave_up: threading.Event | None = None) -> Callable[[], list[Hit]]:
        """The blocking work of one search, to run in a thread; stops early once ``gave_up``."""
        dirty = lazy_sync and (self._dirty or self._files_pending or not self.watch
                               or not self._tasks)
        stop = gave_up.is_set if gave_up is not None else None

        def run() -> list[Hit]:
            if dirty:
                self.index.sync_files(stop=stop)
            from lucidgate.memory.search.query import search  # numpy and the ranking load on the first search

            return search(self.index, query, k=k or self.max_results, scope=scope,
                          sources=sources, settings=self.settings,
                          vectors_if_ready=vectors_if_ready, stop=stop)

        if dirty:
            self._dirty = False
            self._changed.set()  # embeddings for whatever was new follow in the background
        return run

    async def recall(self, query: str, *, scope: Scope, k: int, min_score: float,
                     timeout_s: float | None = None) -> list[Hit]:
        """Auto-recall hits at or above ``min_score``; [] on any problem or timeout
        (``timeout_s``, by default ``recall_timeout_s``)."""
        timeout_s = self.recall_timeout_s if timeout_s is None else timeout_s
        if not query.strip() or k <= 0:
            return []
        gave_up = threading.Event()
        if self._recall_pool is None:  # used without start (a one-shot CLI turn)
            self._recall_pool = _recall_pool()
        try:
            job = self._query_job(query, scope=scope, k=k, sources=None, lazy_sync=True,
                                  vectors_if_ready=True, gave_up=gave_up)
            async with asyncio.timeout(timeout_s):
                hits = await asyncio.get_running_loop().run_in_executor(self._recall_pool, job)
        except Exception as exc:
            logger.warning("auto-recall skipped: %s", str(exc) or type(exc).__name__)
            return []
        finally:
            gave_up.set()  # a timeout or a cancelled turn: the thread stops at its next step
        return [h for h in hits if h.score >= min_score]

    async def status(self) -> dict:
        return await asyncio.to_thread(self.index.status)

    def status_line(self) -> str:
        """For ``/status`` (reads a few counters from SQLite: fast, but off-loop is better)."""
        try:
            return self.index.status_line()
        except Exception as exc:
            return f"recall index: unavailable ({exc})"


def _pools() -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
    """The background sync's one niced thread, and auto-recall's pool."""
    return ThreadPoolExecutor(1, thread_name_prefix="recall-sync", initializer=_lower_priority), _recall_pool()


def _recall_pool() -> ThreadPoolExecutor:
    """Auto-recall's own threads: a few, so concurrent turns do not queue behind one another's
    recall, and none of the default executor's, which session and inbox fsyncs need."""
    return ThreadPoolExecutor(RECALL_THREADS, thread_name_prefix="recall-query")


def _lower_priority() -> None:
    """Nice the calling thread (Linux: per thread) so indexing yields to turns."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def make_recall_service(config: Config, *, watch: bool = True, embedders: Embedders | None = None,
                        hub: WatchHub | None = None, threads: RecallThreads | None = None) -> RecallService | None:
    """The service ``agents.defaults.memory.search`` describes; None when disabled.

    ``watch=False`` (``lucid agent``: a short-lived process) skips the file watcher; the
    index is then brought up to date before each search instead. ``hub``, ``threads``: one
    watcher and one set of threads shared by every agent's index (a gateway's), not one each."""
    opened = open_index(config, embedders)  # agents with the same settings share one embedder
    if opened is None:
        return None
    index, settings = opened
    conf = config.agent.memory.search
    return RecallService(index, settings=settings, watch=conf.watch and watch, max_results=conf.max_results,
                         hub=hub, threads=threads)
