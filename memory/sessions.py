"""Short-term memory: one append-only JSONL transcript per session (DESIGN §4.1).

Line 1 is metadata; every later line is one message. New messages are *appended*, so a
turn's cost does not grow with the session's length. The metadata line changes only on
creation, metadata updates and ``/new``; it is then rewritten atomically by streaming the
file into a temp file and ``os.replace``-ing it. Consolidation, which recurs all through a
session's life, records ``last_consolidated`` in a tiny sidecar (``<stem>.state.json``)
instead, so it never copies the transcript. Line 1 therefore carries no count that could
go stale: it names the sidecar (``"last_consolidated_in"``); no sidecar means nothing is
archived yet. A ``last_consolidated`` in line 1 (older files, imports) is still read, and
the sidecar wins over it. Pending and interrupted turns are derived from the tail of the log
(``Session.pending_state``), never stored in line 1.

The file format and its loader are ``memory.session_file``. The store holds in memory only
what is still in context: an archived message's position keeps the shared ``ARCHIVED``
marker (``memory.archived``) instead of its dict, so a long chat costs its working set, not
its history. Readers of archived lines (``/new``'s note, the
webhook's read API) get them from the file through ``SessionStore.transcript``.

A transcript is a record and stays as written, but what the owner asked to forget
(``tombstones``) is redacted in the loaded copy — the working set the prompt, the
consolidator, the memory flush and ``/new`` read — including messages appended later.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write, atomic_write_text
from lucidgate.memory.archived import ARCHIVED, is_archived
from lucidgate.memory.naming import read_header, session_file_stem
from lucidgate.memory.session_file import (FORMAT_VERSION, REMINDER_KIND, Session, dumps_line, load_session_file,
                                           now_iso, terminate_torn_tail)
from lucidgate.memory.session_sidecar import read_state, persisted_last_consolidated, state_path
from lucidgate.memory.tombstones import Matcher, Tombstones, redact_message

logger = logging.getLogger(__name__)

__all__ = ["ARCHIVED", "FORMAT_VERSION", "REMINDER_KIND", "Session", "SessionStore", "is_archived",
           "load_session_file", "now_iso", "persisted_last_consolidated", "read_header", "state_path"]


class SessionStore:
    """Loads, caches (bounded LRU) and appends to session files under ``sessions_dir``.

    Writes to one session are serialised by a per-session lock; call the async methods
    from the event loop — file work happens in worker threads.
    """

    def __init__(self, sessions_dir: Path, *, cache_size: int = 256,
                 tombstones: Tombstones | None = None) -> None:
        self.dir = sessions_dir
        self.tombstones = tombstones
        self._cache: OrderedDict[str, Session] = OrderedDict()
        self._cache_size = cache_size
        self._locks: dict[str, asyncio.Lock] = {}
        self._pins: dict[str, int] = {}
        self._redacted_at: tuple[int, int, int] | None = None  # tombstones' version when last applied

    def path_for(self, key: str) -> Path:
        return self.dir / f"{session_file_stem(key)}.jsonl"

    def lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    # -- reading ---------------------------------------------------------------------------
    async def get(self, key: str, *, origin: dict[str, Any] | None = None) -> Session:
        """The session for ``key``, loaded from disk or created (and written) on first use."""
        session = self._cache.get(key)
        if session is not None:
            self._cache.move_to_end(key)
            await self._catch_up()
            return session
        async with self.lock(key):
            session = self._cache.get(key)
            if session is None:
                session = await asyncio.to_thread(self._load_or_create, key, origin)
                self._remember(session)
        return session

    def pin(self, key: str) -> None:
        """Keep ``key`` cached while a worker uses it, so everyone shares one ``Session``."""
        self._pins[key] = self._pins.get(key, 0) + 1

    def unpin(self, key: str) -> None:
        left = self._pins.get(key, 0) - 1
        if left > 0:
            self._pins[key] = left
        else:
            self._pins.pop(key, None)

    def _remember(self, session: Session) -> None:
        self._cache[session.key] = session
        self._cache.move_to_end(session.key)
        for old_key in list(self._cache):
            if len(self._cache) <= self._cache_size:
                break
            if old_key in self._pins or old_key == session.key:
                continue
            del self._cache[old_key]
            lock = self._locks.get(old_key)
            if lock is not None and not lock.locked():
                del self._locks[old_key]

    def _load_or_create(self, key: str, origin: dict[str, Any] | None) -> Session:
        path = self.path_for(key)
        if path.exists():
            terminate_torn_tail(path)
            return load_session_file(path, key, redact=self._matcher(), release_archived=True)
        session = Session(key=key, path=path, metadata={"origin": origin} if origin else {})
        self.dir.mkdir(parents=True, exist_ok=True)
        state_path(path).unlink(missing_ok=True)  # a leftover mark must not hide new messages
        self._rewrite(session)
        return session

    async def _catch_up(self) -> None:
        """A forget in another process (``lucid memory forget``) added a tombstone: redact the
        loaded sessions too, not only the ones loaded from now on."""
        if self.tombstones is None:
            return
        version = await asyncio.to_thread(self.tombstones.version)
        if version != self._redacted_at:
            self._redacted_at = version
            matcher = self.tombstones.matcher()
            for session in self._cache.values():
                session.messages[:] = [redact_message(m, matcher) for m in session.messages]

    def _matcher(self) -> Matcher | None:
        return self.tombstones.matcher() if self.tombstones is not None else None

    async def redact(self, matcher: Matcher, probe: Matcher | None = None) -> int:
        """Redact ``matcher``'s texts in every loaded session (a forget just added one);
        returns how many transcripts — loaded or on disk, closed ones included — hold what
        ``probe`` (default ``matcher``) matches."""
        probe = probe or matcher
        for session in list(self._cache.values()):
            async with self.lock(session.key):
                fresh = [redact_message(m, matcher) for m in session.messages]
                if any(a is not b for a, b in zip(fresh, session.messages, strict=True)):
                    session.messages[:] = fresh

        def scan() -> int:
            if not self.dir.exists():
                return 0
            found = 0
            for path in self.dir.iterdir():
                if path.name.endswith((".jsonl", ".jsonl.old")):
                    try:
                        found += probe.matches(path.read_text(encoding="utf-8", errors="replace"))
                    except OSError:
                        continue
            return found

        return await asyncio.to_thread(scan)

    def cached(self, key: str) -> Session | None:
        return self._cache.get(key)

    def keys_on_disk(self) -> list[str]:
        """Session keys of every transcript on disk (reads only each file's first line)."""
        keys: list[str] = []
        if not self.dir.exists():
            return keys
        for path in sorted(self.dir.glob("*.jsonl")):
            header = read_header(path)
            if header is not None:
                keys.append(header["key"])
        return keys

    # -- writing ---------------------------------------------------------------------------
    async def append(self, session: Session, *messages: dict[str, Any], sync: bool = False) -> None:
        """Append messages to the transcript (and the in-memory session). ``sync`` fsyncs."""
        stamped = [m if "timestamp" in m else {**m, "timestamp": now_iso()} for m in messages]
        payload = "".join(dumps_line(m) + "\n" for m in stamped)
        async with self.lock(session.key):
            write = asyncio.ensure_future(asyncio.to_thread(self._append_raw, session.path, payload, sync,
                                                            stamped))
            try:
                shown = await asyncio.shield(write)
            except asyncio.CancelledError:
                # The thread writes the line anyway: keep memory in step with disk, then go.
                await asyncio.wait({write})
                if not write.cancelled() and write.exception() is None:
                    session.messages.extend(write.result())
                raise
            session.messages.extend(shown)
            session.updated_at = stamped[-1]["timestamp"]

    def _append_raw(self, path: Path, payload: str, sync: bool,
                    messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append ``payload``; returns ``messages`` as the working set holds them (redacted:
        the record keeps the words, the prompt does not)."""
        with path.open("a", encoding="utf-8") as fh:
            fh.write(payload)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        matcher = self._matcher()
        return [redact_message(m, matcher) for m in messages] if matcher else messages

    async def set_last_consolidated(self, session: Session, count: int) -> None:
        """Record that the first ``count`` messages are archived.

        Written to a small sidecar (atomic replace), not by rewriting line 1: rewriting the
        header means copying the whole transcript, and consolidation recurs for as long as
        a session lives, so that cost would grow with the session's length. Line 1 only
        names this file.
        """
        if not 0 <= count <= len(session.messages):
            raise ValueError(f"last_consolidated {count} outside 0..{len(session.messages)}")
        async with self.lock(session.key):
            session.last_consolidated = count
            session.updated_at = now_iso()
            state = {"last_consolidated": count, "updated_at": session.updated_at}
            await asyncio.to_thread(atomic_write_text, state_path(session.path), dumps_line(state) + "\n")
            session.release_archived()

    async def transcript(self, session: Session) -> list[dict[str, Any]]:
        """Every message of ``session``, the archived ones read back from its file (redacted
        as the loaded ones are): for the rare readers of what left the context."""
        if session.released == 0:
            return list(session.messages)
        async with self.lock(session.key):
            released, tail = session.released, list(session.messages[session.released:])
            on_disk = await asyncio.to_thread(load_session_file, session.path, session.key,
                                              redact=self._matcher())
        return on_disk.messages[:released] + tail

    def _rewrite(self, session: Session) -> None:
        """Write a new header followed by the existing message lines, then swap atomically.

        The new header has no count, so a count that only the old line 1 held (an older
        or imported file) moves to the sidecar first."""
        if session.last_consolidated and read_state(session.path) != session.last_consolidated:
            state = {"last_consolidated": session.last_consolidated, "updated_at": session.updated_at}
            atomic_write_text(state_path(session.path), dumps_line(state) + "\n")
        with atomic_write(session.path) as out:
            out.write((dumps_line(session.header()) + "\n").encode("utf-8"))
            if session.path.exists():
                with session.path.open("rb") as src:
                    src.readline()  # old header
                    shutil.copyfileobj(src, out)

    async def set_origin(self, session: Session, origin: dict[str, Any]) -> None:
        """Replace the session's stored origin (rare: a chat that became shared), rewriting
        line 1."""
        async with self.lock(session.key):
            session.metadata["origin"] = origin
            session.updated_at = now_iso()
            await asyncio.to_thread(self._rewrite, session)

    async def reset(self, session: Session) -> Session:
        """``/new``: keep the old transcript under a timestamped name, start a fresh one."""
        async with self.lock(session.key):
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
            archived = session.path.with_name(f"{session.path.stem}.{stamp}.jsonl.old")
            fresh = Session(key=session.key, path=session.path,
                            metadata={k: v for k, v in session.metadata.items() if k == "origin"})

            def swap() -> None:
                # The mark goes first: a crash before the rename then shows archived messages
                # again (harmless) rather than hiding a new transcript's messages.
                state_path(session.path).unlink(missing_ok=True)
                if session.path.exists():
                    os.replace(session.path, archived)
                self._rewrite(fresh)

            await asyncio.to_thread(swap)
            self._remember(fresh)
            return fresh
