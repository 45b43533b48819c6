"""One file watcher for the recall indexes of every agent of a gateway (issue 41).

A recall index learns of changed memory files from a ``watchfiles`` watcher. Each watcher
is a thread that wakes every ``step`` milliseconds to check whether it should stop, so ten
agents with a watcher each cost ten threads and ten times the idle CPU of one (measured by
bench/bench_agents_idle.py). The hub runs a single watcher over every registered workspace
and tells the index whose workspace a change is in.

Indexes register as they start (``add``) and leave as they stop (``remove``); the watcher is
restarted over the new set of folders each time (the old one is told to stop and ends within
a step). When the watcher fails (inotify limits, say), every registered index is told
(``on_failure``) and falls back to syncing before each search, as it does without a watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["WatchHub"]


@dataclass(frozen=True, slots=True)
class _Watched:
    workspace: Path
    relevant: Callable[[str], bool]  # a workspace-relative POSIX path the index reads
    on_change: Callable[[], None]
    on_failure: Callable[[Exception], None]

    def owns(self, path: str) -> str | None:
        """``path`` relative to this workspace, or None when it lies elsewhere."""
        try:
            return Path(path).relative_to(self.workspace).as_posix()
        except ValueError:
            return None


class WatchHub:
    """The gateway's one recall watcher; ``debounce_ms`` groups a burst of writes."""

    def __init__(self, debounce_ms: int = 800) -> None:
        self.debounce_ms = debounce_ms
        self._watched: dict[Path, _Watched] = {}
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def folders(self) -> list[Path]:
        return list(self._watched)

    def add(self, workspace: Path, relevant: Callable[[str], bool], on_change: Callable[[], None],
            on_failure: Callable[[Exception], None]) -> None:
        """Watch ``workspace`` for its index: ``relevant`` picks the files it reads (relative
        paths); ``on_change`` is called after a burst of changes to them."""
        self._watched[workspace] = _Watched(workspace, relevant, on_change, on_failure)
        self._restart()

    async def remove(self, workspace: Path) -> None:
        """Stop watching ``workspace``; the last one out stops the watcher and waits for it."""
        if self._watched.pop(workspace, None) is None:
            return
        self._restart()
        if not self._watched:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _restart(self) -> None:
        if self._stop is not None:
            self._stop.set()  # the running watcher returns within one step
            self._stop = None
        if not self._watched:
            return
        self._stop = asyncio.Event()
        task = asyncio.create_task(self._run(dict(self._watched), self._stop), name="recall-watch")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, watched: dict[Path, _Watched], stop: asyncio.Event) -> None:
        import watchfiles

        def relevant(_change: watchfiles.Change, path: str) -> bool:
            return any((rel := w.owns(path)) is not None and w.relevant(rel) for w in watched.values())

        try:
            async for changes in watchfiles.awatch(*watched, watch_filter=relevant, debounce=self.debounce_ms,
                                                   stop_event=stop):
                touched = {w.workspace for _, path in changes for w in watched.values() if w.owns(path) is not None}
                for workspace in touched:
                    with contextlib.suppress(Exception):
                        watched[workspace].on_change()
        except Exception as exc:  # e.g. inotify limits: searches still sync lazily
            logger.warning("recall index: file watcher stopped (%s); syncing before searches only", exc)
            for w in watched.values():
                w.on_failure(exc)
