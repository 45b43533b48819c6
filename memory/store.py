"""MemoryStore: the mid-term history log, its cursors, and the long-term markdown files.

Layout (DESIGN §3, §4.2)::

    memory/history.jsonl   {"cursor", "timestamp", "content", "session_key"} per line
                           (+ "channel", "chat_type", "owner" when the writer knows them)
    memory/archive/history-YYYY-MM.jsonl   entries compaction moved out (append-only)
    memory/.cursor         last cursor written (rebuilt from the log when lost)
    memory/.dream_cursor   last cursor Dream has processed
    memory/MEMORY.md, SOUL.md, USER.md

Cursors are unique and strictly increasing across sessions *and processes*: an append
holds an asyncio lock (this process) plus ``memory/.history.lock`` (every process) and
takes ``max(.cursor, last line's cursor) + 1``. Reads go through an incremental index
(``_history_index``), so the per-turn ``recent()`` never re-reads the file. All file work
runs in worker threads; a ``threading.RLock`` guards the index between them.

What the owner asked to forget (``tombstones``) never gets in: ``append_history`` drops
the lines of an entry that hold a forgotten text (an entry left empty is not written) and
``write_text`` the lines of a memory file that do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from filelock import FileLock, Timeout

from lucidgate.config.fileio import atomic_write_bytes, atomic_write_text, read_int_file, read_text_or_empty
from lucidgate.config.schema import AgentDefaults, MemoryConfig
from lucidgate.memory._history_archive import archive_entries
from lucidgate.memory._history_index import HistoryEntry, HistoryIndex, parse_entry
from lucidgate.memory.errors import MemoryStoreError
from lucidgate.memory.tombstones import Tombstones

logger = logging.getLogger(__name__)

__all__ = ["HistoryEntry", "MemoryStore", "Which"]

Which = Literal["memory", "soul", "user"]
T = TypeVar("T")
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M"


class MemoryStore:
    def __init__(
        self,
        workspace: Path,
        *,
        max_history_entries: int = MemoryConfig.default_of("max_history_entries"),
        timezone: str = AgentDefaults.default_of("timezone"),
        lock_timeout_s: float = 30.0,
        tombstones: Tombstones | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        self.tombstones = tombstones or Tombstones(self.workspace)
        memory_dir = self.workspace / "memory"
        self.history_path = memory_dir / "history.jsonl"
        self.cursor_path = memory_dir / ".cursor"
        self.dream_cursor_path = memory_dir / ".dream_cursor"
        self.partial_path = memory_dir / "history.jsonl.partial"
        self.archive_dir = memory_dir / "archive"
        self.memory_path = memory_dir / "MEMORY.md"
        self.soul_path = self.workspace / "SOUL.md"
        self.user_path = self.workspace / "USER.md"
        self.max_history_entries = max_history_entries
        try:
            self.tz = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise MemoryStoreError(
                f"unknown timezone {timezone!r}; use an IANA name such as 'Europe/Berlin'"
            ) from exc
        self._alock = asyncio.Lock()
        self._mutex = threading.RLock()
        # Appends are short: poll the OS lock often so a contended append waits ms, not 50 ms.
        self._file_lock = FileLock(memory_dir / ".history.lock", timeout=lock_timeout_s,
                                   poll_interval=0.005)
        self._index = HistoryIndex(self.history_path, tail_limit=max(max_history_entries, 1000))
        self._loaded = False
        self._stored_cursor = 0  # last value seen in .cursor
        self._dream_key: tuple[int, int, int] | None = None  # stat of .dream_cursor last read

    # ------------------------------------------------------------------ paths and time
    def path_for(self, which: Which) -> Path:
        return {"memory": self.memory_path, "soul": self.soul_path, "user": self.user_path}[which]

    def now(self) -> datetime:
        return datetime.now(self.tz)

    def timestamp(self) -> str:
        """``YYYY-MM-DD HH:MM`` in the configured timezone (the history line format)."""
        return self.now().strftime(TIMESTAMP_FORMAT)

    # ------------------------------------------------------------------ history: writing
    async def append_history(self, content: str, *, session_key: str | None = None,
                             timestamp: str | None = None, channel: str | None = None,
                             chat_type: str | None = None, owner: bool | None = None,
                             speakers: Sequence[str] = ()) -> int:
        """Append one entry durably (fsynced) and return its cursor.

        ``timestamp`` keeps an imported entry's original time (default: now).
        ``channel``/``chat_type``/``owner`` are provenance for the recall index, which
        scopes what a guest or group chat may find; recorded when given. ``speakers``: a
        shared chat's entry names whose lines it summarises. Lines holding a forgotten text are
        dropped first; when none is left, nothing is written and the last cursor is returned.
        """
        provenance: dict[str, object] = {k: v for k, v in (("channel", channel), ("chat_type", chat_type),
                                        ("owner", owner)) if v is not None}
        if speakers:
            provenance["speakers"] = list(speakers)
        async with self._alock:
            return await asyncio.to_thread(self._append_sync, content, session_key, timestamp, provenance)

    def _append_sync(self, content: str, session_key: str | None, timestamp: str | None = None,
                     provenance: dict[str, object] | None = None) -> int:
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        content, dropped = self.tombstones.matcher().drop_lines(content)
        with self._locked_file(), self._mutex:
            self._repair_tail()
            self._refresh()
            if dropped:
                logger.info("history: %d line(s) matching a forgotten text dropped before writing",
                            len(dropped))
                if not content.strip():
                    return max(self._index.last_cursor, self._stored_cursor)
            stored = read_int_file(self.cursor_path)
            if stored is None and self._index.last_cursor:
                logger.warning(".cursor missing or corrupt; rebuilt from history.jsonl")
            cursor = max(stored or 0, self._index.last_cursor) + 1
            record = {"cursor": cursor, "timestamp": timestamp or self.timestamp(),
                      "content": content, "session_key": session_key, **(provenance or {})}
            line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
            fd = os.open(self.history_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            # Not fsynced: the history line is, and .cursor is rebuilt from it if lost.
            atomic_write_text(self.cursor_path, f"{cursor}\n", durable=False)
            self._stored_cursor = cursor
            self._index.refresh()
            return cursor

    @contextmanager
    def _locked_file(self) -> Iterator[None]:
        """Hold ``memory/.history.lock`` (every process appending or compacting takes it)."""
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._file_lock.acquire()
        except Timeout as exc:
            raise MemoryStoreError(
                f"{self._file_lock.lock_file} stayed locked for {self._file_lock.timeout:.0f} s; "
                "another lucid process is stuck writing history — stop it and retry"
            ) from exc
        try:
            yield
        finally:
            self._file_lock.release()

    def _repair_tail(self) -> None:
        """With the file lock held, a last line without newline is a crash remnant.

        A remnant that parses as a valid next entry (a hand edit lost its newline) is kept
        and terminated; anything else is moved to ``history.jsonl.partial`` so the log
        stays valid JSONL and the next append starts on a fresh line.
        """
        try:
            size = self.history_path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0:
            return
        self._index.refresh()
        with self.history_path.open("rb+") as fh:
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            cut = _after_last_newline(fh, size)
            fh.seek(cut)
            fragment = fh.read()
            entry = parse_entry(fragment)
            if entry is not None and entry.cursor > self._index.last_cursor:
                fh.seek(size)
                fh.write(b"\n")
                logger.warning("history.jsonl: last line had no newline; terminated it")
            else:
                with self.partial_path.open("ab") as salvage:
                    salvage.write(fragment + b"\n")
                fh.truncate(cut)
                logger.warning(
                    "history.jsonl ended with an incomplete line (%d bytes; a crash mid-write?); "
                    "moved it to %s", len(fragment), self.partial_path.name,
                )
            fh.flush()
            os.fsync(fh.fileno())

    async def compact_history(self) -> int:
        """Move the oldest entries beyond ``max_history_entries`` that Dream has processed
        to the monthly archive; nothing is deleted (the recall index still finds them)."""
        async with self._alock:
            return await asyncio.to_thread(self._compact_sync)

    def _compact_sync(self) -> int:
        if not self.history_path.exists():
            return 0
        with self._locked_file(), self._mutex:
            self._repair_tail()
            self._refresh()
            index = self._index
            excess = len(index.cursors) - self.max_history_entries
            drop = min(excess, len(index.cursors) - index.count_after(index.dream_cursor))
            if drop <= 0:
                return 0
            with self.history_path.open("rb") as fh:
                dropped = fh.read(index.offsets[drop])
                kept = fh.read()
            # Archive first: a crash in between leaves the entries in both places, and the
            # next compaction skips the ones the archive already holds.
            archive_entries(self.archive_dir, dropped.splitlines(keepends=True))
            atomic_write_bytes(self.history_path, kept)
            index.refresh()  # a new inode: the index starts over on the compacted file
            logger.info("history.jsonl compacted: %d processed entries moved to %s",
                        drop, self.archive_dir.name)
            return drop

    async def with_history_locked(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread holding every history lock (``forget`` rewrites the
        live file and the archive in it); the index re-reads the files afterwards."""
        def run() -> T:
            with self._locked_file(), self._mutex:
                self._repair_tail()
                try:
                    return fn()
                finally:
                    self._index.refresh()

        async with self._alock:
            return await asyncio.to_thread(run)

    # ------------------------------------------------------------------ history: reading
    def _refresh(self) -> None:
        """Bring the index up to date with the files (cheap stat calls when unchanged)."""
        if not self._loaded:
            self._stored_cursor = read_int_file(self.cursor_path) or 0
            self._loaded = True
        self._index.refresh()
        self._sync_dream_cursor()

    def _sync_dream_cursor(self) -> None:
        try:
            st = self.dream_cursor_path.stat()
            key: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        if key == self._dream_key and key is not None:
            return
        value = read_int_file(self.dream_cursor_path) or 0
        last = max(self._index.last_cursor, read_int_file(self.cursor_path) or 0)
        if value > last:
            logger.warning(
                ".dream_cursor (%d) is past the end of history (%d); clamped", value, last
            )
            value = last
            atomic_write_text(self.dream_cursor_path, f"{value}\n")
            st = self.dream_cursor_path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        self._dream_key = key
        if value != self._index.dream_cursor:
            self._index.set_dream_cursor(value)

    async def read_unprocessed(
        self, since: int | None = None, limit: int | None = None
    ) -> list[HistoryEntry]:
        """Entries with cursor > ``since`` (default: the dream cursor), oldest first."""
        def read() -> list[HistoryEntry]:
            with self._mutex:
                self._refresh()
                start = self._index.dream_cursor if since is None else since
                return self._index.entries_after(start, limit)

        return await asyncio.to_thread(read)

    async def recent(
        self, *, limit: int, session_keys: Collection[str] | None = None
    ) -> list[HistoryEntry]:
        """The last ``limit`` entries after the dream cursor from ``session_keys`` (None = all).

        Served from the in-memory cache: a stat to notice appends by other processes, no
        file read unless something new arrived.
        """
        def read() -> list[HistoryEntry]:
            with self._mutex:
                self._refresh()
                return self._index.recent(limit, session_keys)

        return await asyncio.to_thread(read)

    async def refresh(self) -> None:
        """Re-sync the cached cursors with the files (other processes may have written)."""
        def run() -> None:
            with self._mutex:
                self._refresh()

        await asyncio.to_thread(run)

    # The three synchronous accessors answer from the cached index (loaded once, lazily);
    # call ``await refresh()`` first when another process may have written meanwhile.
    def last_cursor(self) -> int:
        with self._mutex:
            self._ensure_loaded()
            return max(self._index.last_cursor, self._stored_cursor)

    def dream_cursor(self) -> int:
        with self._mutex:
            self._ensure_loaded()
            return self._index.dream_cursor

    def unprocessed_count(self) -> int:
        with self._mutex:
            self._ensure_loaded()
            return self._index.count_after(self._index.dream_cursor)

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._refresh()

    async def set_dream_cursor(self, cursor: int) -> None:
        def write() -> None:
            with self._mutex:
                self._refresh()
                last = max(self._index.last_cursor, read_int_file(self.cursor_path) or 0)
                value = max(0, cursor)
                if value > last:
                    logger.warning("dream cursor %d is past the end of history (%d); clamped",
                                   value, last)
                    value = last
                atomic_write_text(self.dream_cursor_path, f"{value}\n")
                st = self.dream_cursor_path.stat()
                self._dream_key = (st.st_ino, st.st_mtime_ns, st.st_size)
                self._index.set_dream_cursor(value)

        await asyncio.to_thread(write)

    # ------------------------------------------------------------------ long-term files
    async def read_text(self, which: Which) -> str:
        return await asyncio.to_thread(read_text_or_empty, self.path_for(which))

    async def write_text(self, which: Which, text: str) -> None:
        """Write a long-term file atomically, without lines holding a forgotten text."""
        await asyncio.to_thread(self._write_sync, self.path_for(which), text)

    def _write_sync(self, path: Path, text: str) -> None:
        text, dropped = self.tombstones.matcher().drop_lines(text)
        if dropped:
            logger.info("%s: %d line(s) matching a forgotten text dropped before writing",
                        path.name, len(dropped))
        atomic_write_text(path, text)


def _after_last_newline(fh: BinaryIO, size: int) -> int:
    """Byte position just after the last b"\\n" before ``size`` (0 when there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        fh.seek(start)
        chunk = fh.read(pos - start)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return start + found + 1
        pos = start
    return 0
