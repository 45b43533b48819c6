"""An incremental in-memory index of ``memory/history.jsonl`` (DESIGN §4.2).

The prompt builder asks for the recent, not-yet-dreamed entries on every turn, so reads
must not re-scan the file. The index remembers how many bytes it has consumed and the
file's inode: a refresh only reads bytes appended since (by this or another process) and
starts over only when the file was replaced (compaction) or shrank. It keeps
``cursor -> byte offset`` for every entry plus a bounded cache of the entries after the
dream cursor, grouped per session so a scoped ``recent()`` costs O(result).

Not thread-safe by itself: ``MemoryStore`` serialises every call with a lock.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import logging
import os
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a history entry came from, in the recall index's vocabulary (``channel``,
    ``chat_type``, ``owner``). ``owner`` is None when unknown (not recorded)."""

    channel: str | None = None
    chat_type: str | None = None
    owner: bool | None = None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One line of history.jsonl. Provenance fields are None on entries written before the
    consolidator recorded them."""

    cursor: int
    timestamp: str
    content: str
    session_key: str | None
    channel: str | None = None
    chat_type: str | None = None
    owner: bool | None = None
    # A shared chat's entry: the labels of the people whose lines it summarises
    # (``memory.speakers``), so wherever it is shown it says whose words it holds.
    speakers: tuple[str, ...] = ()


def parse_entry(raw: bytes) -> HistoryEntry | None:
    """One history line -> entry; None when it is not a well-formed entry."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    cursor, content = data.get("cursor"), data.get("content")
    timestamp, key = data.get("timestamp", ""), data.get("session_key")
    if type(cursor) is not int or cursor < 1 or not isinstance(content, str):
        return None
    if not isinstance(timestamp, str) or not (key is None or isinstance(key, str)):
        return None
    channel, chat_type, owner = data.get("channel"), data.get("chat_type"), data.get("owner")
    speakers = data.get("speakers")
    return HistoryEntry(cursor, timestamp, content, key,
                        channel=channel if isinstance(channel, str) else None,
                        chat_type=chat_type if isinstance(chat_type, str) else None,
                        owner=owner if isinstance(owner, bool) else None,
                        speakers=tuple(s for s in speakers if isinstance(s, str))
                        if isinstance(speakers, list) else ())


class HistoryIndex:
    def __init__(self, path: Path, *, tail_limit: int) -> None:
        self.path = path
        self.tail_limit = max(1, tail_limit)
        self.dream_cursor = 0
        self._reset()

    def _reset(self) -> None:
        self._inode: tuple[int, int] | None = None
        self._consumed = 0  # bytes up to and including the last complete line
        self.cursors: list[int] = []
        self.offsets: list[int] = []
        self._tail: dict[int, HistoryEntry] = {}  # cursor -> entry, ascending
        self._by_session: dict[str | None, deque[int]] = {}
        # Every indexed entry with cursor > _cached_after is in _tail.
        self._cached_after = self.dream_cursor

    # ------------------------------------------------------------------ reading the file
    @property
    def last_cursor(self) -> int:
        return self.cursors[-1] if self.cursors else 0

    @property
    def consumed(self) -> int:
        return self._consumed

    def refresh(self) -> None:
        """Pick up whatever was appended since the last refresh (cheap when nothing was)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._inode is not None or self.cursors:
                self._reset()
            return
        if (st.st_dev, st.st_ino) != self._inode or st.st_size < self._consumed:
            self._reset()
            self._inode = (st.st_dev, st.st_ino)
        if st.st_size > self._consumed:
            with self.path.open("rb") as fh:
                self._consume(fh)

    def _consume(self, fh: BinaryIO) -> None:
        fh.seek(self._consumed)
        offset = self._consumed
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # a line still being written (or a crash remnant): not ours yet
            self._ingest(raw, offset)
            offset += len(raw)
        self._consumed = offset

    def _ingest(self, raw: bytes, offset: int) -> None:
        if not raw.strip():
            return
        entry = parse_entry(raw)
        if entry is None:
            logger.warning("history.jsonl: corrupt line at byte %d skipped", offset)
            return
        if entry.cursor <= self.last_cursor:
            logger.warning(
                "history.jsonl: cursor %d at byte %d is not above %d; line skipped",
                entry.cursor, offset, self.last_cursor,
            )
            return
        self.cursors.append(entry.cursor)
        self.offsets.append(offset)
        if entry.cursor > self.dream_cursor:
            self._cache(entry)

    # ------------------------------------------------------------------ the tail cache
    def _cache(self, entry: HistoryEntry) -> None:
        self._tail[entry.cursor] = entry
        self._by_session.setdefault(entry.session_key, deque()).append(entry.cursor)
        while len(self._tail) > self.tail_limit:
            oldest = next(iter(self._tail))
            self._drop_cached(oldest)
            self._cached_after = oldest

    def _drop_cached(self, cursor: int) -> None:
        entry = self._tail.pop(cursor)
        keyed = self._by_session[entry.session_key]
        keyed.popleft()  # the oldest cached entry is also the oldest of its session
        if not keyed:
            del self._by_session[entry.session_key]

    def set_dream_cursor(self, cursor: int) -> None:
        """Move the dream cursor; going backwards rebuilds the cache from the file."""
        if cursor < self.dream_cursor:
            self.dream_cursor = cursor
            self._reset()
            self.refresh()
            return
        self.dream_cursor = cursor
        while self._tail:
            oldest = next(iter(self._tail))
            if oldest > cursor:
                break
            self._drop_cached(oldest)
        self._cached_after = max(self._cached_after, cursor)

    # ------------------------------------------------------------------ queries
    def count_after(self, cursor: int) -> int:
        return len(self.cursors) - bisect.bisect_right(self.cursors, cursor)

    def entries_after(self, since: int, limit: int | None) -> list[HistoryEntry]:
        """Entries with cursor > since, oldest first: from the cache when it covers them."""
        start = bisect.bisect_right(self.cursors, since)
        stop = len(self.cursors) if limit is None else min(len(self.cursors), start + limit)
        if start >= stop:
            return []
        if since >= self._cached_after:
            return [self._tail[c] for c in self.cursors[start:stop]]
        try:
            return self._read_entries(start, stop)
        except _StaleIndex:
            self._reset()
            self.refresh()
            return self.entries_after(since, limit)

    def _read_entries(self, start: int, stop: int) -> list[HistoryEntry]:
        result: list[HistoryEntry] = []
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            raise _StaleIndex from None
        with fh:
            st = os.fstat(fh.fileno())
            if (st.st_dev, st.st_ino) != self._inode:  # replaced since our last refresh
                raise _StaleIndex
            fh.seek(self.offsets[start])
            wanted = set(self.cursors[start:stop])
            for raw in fh:
                entry = parse_entry(raw)
                if entry is None or entry.cursor not in wanted:
                    continue
                result.append(entry)
                if len(result) == stop - start:
                    break
        return result

    def recent(self, limit: int, session_keys: Collection[str] | None) -> list[HistoryEntry]:
        """The last ``limit`` cached entries after the dream cursor, oldest first."""
        if limit <= 0:
            return []
        if session_keys is None:
            picked = list(itertools.islice(reversed(self._tail), limit))
        else:
            streams = [
                itertools.islice(reversed(self._by_session[key]), limit)
                for key in set(session_keys)
                if key in self._by_session
            ]
            picked = list(itertools.islice(heapq.merge(*streams, reverse=True), limit))
        return [self._tail[c] for c in reversed(picked)]


class _StaleIndex(Exception):
    """The file was replaced under us; the caller refreshes and retries."""
