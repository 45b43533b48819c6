"""Components: the parts of a gateway that have a life, each with one ``start`` and one ``stop``.

The composition root (gateway/app.py) registers them in dependency order; ``Lifecycle`` starts
them in that order and stops them in reverse, through one loop each way. Two rules live here
and nowhere else:

* A failure while starting stops, in reverse, exactly what had started, and re-raises: a
  gateway never runs half-built.
* A component registered ``optional`` (a channel) may refuse: its refusal is logged, it is
  stopped at once (releasing whatever it half-opened), marked failed, and the others start on.
  One platform's bad token must not take the other platforms down.

Stopping never gives up half-way: a component whose stop raises is logged and the rest still
stop; a cancellation met on the way is re-raised once everything has stopped.

A component that can tell whether it works adds ``alive() -> (ok, detail)``; ``/readyz``
asks every registered component (``checks``), so a part that dies while the process runs —
the agent loop's consumer task, say — turns readiness red without anyone polling it by name.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

logger = logging.getLogger(__name__)

__all__ = ["Component", "Lifecycle", "Probed", "Registered", "Step", "Watched"]


class Component(Protocol):
    """A part with a life: started once before the gateway takes messages, stopped once after."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class Watched(Protocol):
    """A component that can say whether it works right now (asked by ``/readyz``). ``alive``
    only reads state the component keeps: it runs on the event loop and must not block."""

    def alive(self) -> tuple[bool, str]: ...


@runtime_checkable
class Probed(Protocol):
    """A component whose check needs I/O (a test write to the disk): ``probe`` does it off the
    event loop, and the next ``alive`` reports what it found."""

    async def probe(self) -> None: ...


async def _nothing() -> None:
    return None


class Step:
    """A component made of callables, for a life that is not one object's ``start``/``stop``:
    preparing the workspace, flushing replies at stop. ``alive`` is optional."""

    def __init__(self, start: Callable[[], Awaitable[None]] = _nothing,
                 stop: Callable[[], Awaitable[None]] = _nothing,
                 alive: Callable[[], tuple[bool, str]] | None = None) -> None:
        self._start, self._stop, self._alive = start, stop, alive

    async def start(self) -> None:
        await self._start()

    async def stop(self) -> None:
        await self._stop()

    def alive(self) -> tuple[bool, str]:
        return (True, "running") if self._alive is None else self._alive()


@dataclass(frozen=True, slots=True)
class Registered:
    name: str
    component: Component
    optional: bool = False
    group: str | None = None  # registered together (the channels), in the group's place


class Lifecycle:
    """The registered components in start order, and which of them run."""

    def __init__(self) -> None:
        self._order: list[Registered] = []
        self._groups: dict[str, int] = {}  # group -> index just after its last member
        self._running: list[Registered] = []
        self._failed: dict[str, str] = {}
        self._started = False

    # -- registering (the composition root, before start) ------------------------------------
    def add(self, name: str, component: Component) -> None:
        """Register ``component`` after everything registered so far."""
        self._insert(len(self._order), Registered(name, component))

    def group(self, group: str) -> None:
        """Mark where the members of ``group`` start; members added later still land here."""
        self._check_open()
        self._groups[group] = len(self._order)

    def add_to(self, group: str, name: str, component: Component, *, optional: bool = True) -> None:
        """Register ``component`` as the last member of ``group`` (see ``group``)."""
        if group not in self._groups:
            raise KeyError(f"no group {group!r}: mark it with group() first")
        self._insert(self._groups[group], Registered(name, component, optional, group))

    def _insert(self, at: int, entry: Registered) -> None:
        self._check_open()
        if any(r.name == entry.name for r in self._order):
            raise ValueError(f"a component named {entry.name!r} is already registered")
        self._order.insert(at, entry)
        for group, end in self._groups.items():
            if end >= at and (end > at or group == entry.group):
                self._groups[group] = end + 1

    def _check_open(self) -> None:
        if self._started:
            raise RuntimeError("components are registered before the gateway starts")

    # -- reading ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Registered]:
        return iter(self._order)

    def members(self, group: str) -> dict[str, Component]:
        """The members of ``group`` that did not refuse to start, in registration order."""
        return {r.name: r.component for r in self._order if r.group == group and r.name not in self._failed}

    @property
    def failed(self) -> dict[str, str]:
        """Optional components that refused to start, with the reason."""
        return dict(self._failed)

    async def checks(self) -> dict[str, tuple[bool, str]]:
        """Every registered component that did not refuse: whether it is alive, and why not."""
        asked = [r for r in self._order if r.name not in self._failed]
        for entry in asked:
            if isinstance(entry.component, Probed):
                await entry.component.probe()
        return {r.name: _alive(r) for r in asked}

    # -- life ------------------------------------------------------------------------------
    async def start(self, *, on_failure: Callable[[], None] | None = None) -> None:
        """Start every component in order; on a failure call ``on_failure``, stop what started,
        in reverse, and re-raise."""
        if self._started:
            raise RuntimeError("already started")
        self._started = True
        for entry in self._order:
            try:
                await entry.component.start()
            except Exception as exc:
                if not entry.optional:
                    logger.error("%s failed to start; stopping what did start", entry.name)
                    await self._undo(on_failure)
                    raise
                logger.error("%s: failed to start (%s) — disabled", entry.name, exc)
                await _stop_quietly(entry)
                self._failed[entry.name] = str(exc)
                continue
            except BaseException:
                logger.error("starting %s was interrupted; stopping what did start", entry.name)
                await self._undo(on_failure)
                raise
            self._running.append(entry)

    async def _undo(self, on_failure: Callable[[], None] | None) -> None:
        if on_failure is not None:
            on_failure()
        await self.stop()

    async def stop(self) -> None:
        """Stop what runs, in reverse order of start. Idempotent."""
        interrupted: BaseException | None = None
        while self._running:
            entry = self._running.pop()
            try:
                await entry.component.stop()
            except Exception:
                logger.exception("stopping %s failed", entry.name)
            except BaseException as exc:  # a cancellation: the rest still stop, then it goes on
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted


def _alive(entry: Registered) -> tuple[bool, str]:
    if isinstance(entry.component, Watched):
        return entry.component.alive()
    return True, "running"


async def _stop_quietly(entry: Registered) -> None:
    try:
        await entry.component.stop()
    except Exception:
        logger.exception("stopping %s failed", entry.name)
