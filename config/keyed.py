"""Keyed workers: one task per key draining that key's queue in order, retired when idle.

The agent runs one worker per session, the bus one delivery lane per chat and the
consolidator one queue of consolidation work per session; all need the same four things, so
they share this primitive:

* **spawn on demand** — ``put`` never waits; the first item for a key starts its worker;
* **no stranded item** — a worker checks its queue again after every await (the item it
  handled) and decides to retire with no await between that last check and leaving the
  table, so an item put at any moment is either seen by the live worker or starts a new one;
* **retire when idle** — a worker with nothing to do for ``idle_s`` leaves, and with it all of
  its key's state, so a stream of distinct keys (webhook chat ids are chosen by the client)
  costs nothing once it stops;
* **bounded** — at most ``limit`` workers exist; the keys beyond wait first-come for a slot,
  and an idle worker gives its slot up at once when a key is waiting.

Each key may carry a small state object (``new_state``), made with its slot and gone when its
worker retires: what belongs to one key's work (the agent keeps the turn in hand there) lives
and dies with that key's queue instead of in a dict beside it.

``wait_idle`` waits until no key has queued or running work, except keys that declared they
are ``resting`` (e.g. waiting out a retry delay: what queues behind them cannot go either).
An exception from ``handle`` is logged and the worker goes on with the next item.
Lives in ``config``, the bottom layer with no dependencies of ours, because layers that may
not import each other use it: ``channels`` (delivery lanes), ``memory`` (the consolidator)
and ``gateway`` (session workers).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Generic

from typing_extensions import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", default=None)


class _Slot(Generic[T, S]):
    __slots__ = ("key", "queue", "wake", "task", "busy", "resting", "state")

    def __init__(self, key: str, state: S | None) -> None:
        self.key = key
        self.state = state
        self.queue: deque[T] = deque()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None  # None while waiting for a slot
        self.busy = False  # has queued items, or one in hand
        self.resting = False  # busy but not to be waited for (see ``resting``)


class KeyedWorkers(Generic[T, S]):
    """Per-key ordered, cross-key concurrent workers (see the module docstring)."""

    def __init__(self, name: str, handle: Callable[[str, T], Awaitable[None]], *, idle_s: float,
                 limit: int = 1024, on_start: Callable[[str], None] | None = None,
                 on_retire: Callable[[str], None] | None = None,
                 new_state: Callable[[str], S] | None = None) -> None:
        if idle_s < 0 or limit < 1:
            raise ValueError("idle_s must be >= 0 and limit >= 1")
        self.name = name
        self.idle_s = idle_s
        self.limit = limit
        self._handle = handle
        self._on_start, self._on_retire = on_start, on_retire
        self._new_state = new_state
        self._slots: dict[str, _Slot[T, S]] = {}
        self._waiting: deque[_Slot[T, S]] = deque()
        self._idle: dict[str, _Slot[T, S]] = {}  # workers waiting for work, oldest first
        self._live = 0
        self._queued = 0
        self._active = 0  # busy and not resting
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._closed = False

    # -- what callers see --------------------------------------------------------------------
    @property
    def workers(self) -> int:
        """Worker tasks alive now (busy or idle)."""
        return self._live

    @property
    def queued(self) -> int:
        """Items waiting in every key's queue (not counting those in hand)."""
        return self._queued

    def busy(self, key: str) -> bool:
        """Whether ``key`` has work queued or running (an idle worker is not busy)."""
        slot = self._slots.get(key)
        return slot is not None and slot.busy

    def __contains__(self, key: str) -> bool:
        return key in self._slots

    def state(self, key: str) -> S | None:
        """``key``'s state object while it has a slot (queued, working or idle), else None."""
        slot = self._slots.get(key)
        return None if slot is None else slot.state

    def queued_items(self) -> list[tuple[str, T]]:
        """Every item still waiting in a queue, per key in order (for a caller that must
        keep some of them when the workers are cancelled)."""
        return [(slot.key, item) for slot in self._slots.values() for item in slot.queue]

    def put(self, key: str, item: T) -> None:
        if self._closed:
            raise RuntimeError(f"{self.name}: closed")
        slot = self._slots.get(key)
        if slot is None:
            state = self._new_state(key) if self._new_state is not None else None
            slot = self._slots[key] = _Slot(key, state)
        slot.queue.append(item)
        self._queued += 1
        self._mark(slot, busy=True)
        if slot.task is not None:
            slot.wake.set()
        elif slot not in self._waiting:
            if self._live < self.limit:
                self._spawn(slot)
            else:
                self._waiting.append(slot)
                self._evict_one_idle()

    @contextmanager
    def resting(self, key: str) -> Iterator[None]:
        """Inside this block ``key``'s work does not hold up ``wait_idle``."""
        slot = self._slots.get(key)
        if slot is None:
            yield
            return
        self._mark(slot, resting=True)
        try:
            yield
        finally:
            self._mark(slot, resting=False)

    async def wait_idle(self) -> None:
        """Return once no key has queued or running work (resting keys excepted)."""
        await self._quiet.wait()

    def cancel(self) -> list[asyncio.Task[None]]:
        """Stop every worker (queued items are dropped: callers keep them durable elsewhere)."""
        self._closed = True
        self._waiting.clear()
        tasks = [slot.task for slot in self._slots.values() if slot.task is not None]
        for task in tasks:
            task.cancel()
        return tasks

    # -- internals ---------------------------------------------------------------------------
    def _mark(self, slot: _Slot[T, S], *, busy: bool | None = None, resting: bool | None = None) -> None:
        was = slot.busy and not slot.resting
        if busy is not None:
            slot.busy = busy
        if resting is not None:
            slot.resting = resting
        now = slot.busy and not slot.resting
        if was != now:
            self._active += 1 if now else -1
            if self._active:
                self._quiet.clear()
            else:
                self._quiet.set()

    def _spawn(self, slot: _Slot[T, S]) -> None:
        self._live += 1
        slot.task = asyncio.create_task(self._run(slot), name=f"{self.name}-{slot.key}")

    def _evict_one_idle(self) -> None:
        """Wake one idle worker to give its slot up, and take it off the idle list, so a
        second key arriving before it has left wakes another one instead of the same."""
        for key, slot in self._idle.items():
            del self._idle[key]
            slot.wake.set()  # it finds its queue empty and a key waiting: it retires
            return

    async def _run(self, slot: _Slot[T, S]) -> None:
        key, queue = slot.key, slot.queue
        try:
            if self._on_start is not None:
                self._on_start(key)
            while True:
                while queue:
                    item = queue.popleft()
                    self._queued -= 1
                    try:
                        await self._handle(key, item)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        logger.exception("%s: handling an item for %s failed", self.name, key)
                self._mark(slot, busy=False)
                if self._waiting or self.idle_s == 0:
                    return  # give the slot to a waiting key
                slot.wake.clear()
                self._idle[key] = slot
                try:
                    async with asyncio.timeout(self.idle_s):
                        await slot.wake.wait()
                except TimeoutError:
                    pass
                finally:
                    self._idle.pop(key, None)
                if not queue:
                    return  # idle for idle_s (or evicted): retire, no await since the check
        finally:
            self._retire(slot)

    def _retire(self, slot: _Slot[T, S]) -> None:
        self._live -= 1
        self._queued -= len(slot.queue)
        self._mark(slot, busy=False, resting=False)
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        if self._on_retire is not None:
            try:
                self._on_retire(slot.key)
            except Exception:
                logger.exception("%s: the retire hook for %s failed", self.name, slot.key)
        while self._waiting and not self._closed and self._live < self.limit:
            self._spawn(self._waiting.popleft())
