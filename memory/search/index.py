"""MemoryIndex: keeps ``memory/index.sqlite`` in step with the memory files.

Synchronous and thread-safe; callers run it in worker threads (``service.py`` does that
for the gateway). Two phases, so a search never waits for embeddings:

1. ``sync_files`` — stat every source; re-read only files whose size or mtime changed,
   re-chunk only those whose content hash changed, and apply the *difference* (unchanged
   chunks keep their rows). Fast: no model involved.
2. ``embed_missing`` — embed chunk texts that have no vector for the current
   (provider, model) in the cache, in batches, outside the database lock. A content hash
   already embedded is never embedded again, whichever file it moves to.

An embedder that fails, or returns vectors of a different dimension than it did before,
switches the index to keyword-only with one log line; ``status()`` says so.
Several processes may sync at once: each file's diff runs in one ``BEGIN IMMEDIATE``
transaction, so they serialise on SQLite's write lock instead of duplicating rows.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lucidgate.memory.search import _db
from lucidgate.memory.search.appended import Mark, digest, drop_mark, load_mark, read_growth, save_mark, tail_digest
from lucidgate.memory.search.chunking import CHUNKS_VERSION, Chunk, Resume
from lucidgate.memory.search._rows import apply_diff, chunk_hash, delete_chunks, insert_chunk, log_added, log_reset, trim_log
from lucidgate.memory.search.embed import Embedder, EmbedderError
from lucidgate.memory.search.sources import APPEND_ONLY, chunk_appended, chunk_file, discover
from lucidgate.memory.search.unembedded import Unembedded
from lucidgate.memory.tombstones import TOMBSTONES_FILE, Matcher, Tombstones

logger = logging.getLogger(__name__)

__all__ = ["FORGOTTEN_FILE", "INDEX_FILE", "MemoryIndex", "Progress"]

INDEX_FILE = "memory/index.sqlite"
FORGOTTEN_FILE = TOMBSTONES_FILE
ALL_SOURCES = ("memory", "notes", "history", "session")
RETRY_EMBEDDER_S = 600.0

Progress = Callable[[str, int, int], None]  # (phase, done, total)


class MemoryIndex:
    def __init__(self, workspace: Path, *, embedder: Embedder | None = None,
                 sources: Collection[str] = ALL_SOURCES, chunk_tokens: int = 400,
                 chunk_overlap: int = 80, batch_size: int = 32, path: Path | None = None,
                 keyword_only_reason: str = "no embedder configured") -> None:
        self.workspace = Path(workspace)
        self.path = path or self.workspace / INDEX_FILE
        self.embedder = embedder
        self.sources = tuple(sources)
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.batch_size = batch_size
        self.keyword_only_reason = keyword_only_reason
        self.embed_error: str | None = None if embedder else keyword_only_reason
        self.settling = 0  # texts the last embed_missing left to settle (see there)
        self.now_ns: Callable[[], int] = time.time_ns  # the wall clock settling is judged by
        self._failed_at: float | None = None
        self._dim: int | None = None
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        # Set by the owner to stop a long sync between files/batches (gateway shutdown).
        self.cancel = threading.Event()
        self._conn: sqlite3.Connection | None = None
        self._inode: tuple[int, int] | None = None
        self.vector_cache: Any = None  # a memory.search.vector_cache.VectorCache, once searched
        self._unembedded = Unembedded()
        self.tombstones = Tombstones(self.workspace)

    # ------------------------------------------------------------------ connection
    def conn(self) -> sqlite3.Connection:
        """The open connection, reopened when the file was swapped by a rebuild."""
        with self._lock:
            try:
                st = os.stat(self.path)
                inode: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except FileNotFoundError:
                inode = None
            if self._conn is not None and inode != self._inode:
                self._conn.close()
                self._conn = None
            if self._conn is None:
                self._conn = _db.connect_or_rebuild(self.path)
                st = os.stat(self.path)
                self._inode = (st.st_dev, st.st_ino)
                self.vector_cache = None
                self._unembedded = Unembedded()
            return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # ------------------------------------------------------------------ phase 1: files
    def sync_files(self, progress: Progress | None = None, *, stop: Callable[[], bool] | None = None) -> int:
        """Bring chunks and FTS rows up to date; returns how many files were re-chunked.

        ``stop``: the caller gave up (auto-recall's timeout) — leave after the current file."""
        with self._sync_lock:
            conn = self.conn()
            owners = self._owner_sessions()
            forgotten = self.tombstones.matcher()
            forgotten_sig = chunk_hash(self.tombstones.signature())
            if stop is not None and stop():
                return 0
            with self._lock:
                known = {row[0]: row[1:] for row in conn.execute(
                    "SELECT path, size, mtime_ns, hash FROM files")}
                if _db.get_meta(conn, "forgotten") != forgotten_sig \
                        or _db.get_meta(conn, "chunks_version") != CHUNKS_VERSION:
                    known = {p: (-1, -1, "") for p in known}  # re-chunk everything once
            files = list(discover(self.workspace, self.sources))
            changed = 0
            for n, f in enumerate(files, 1):
                if self.cancel.is_set() or (stop is not None and stop()):
                    return changed
                old = known.pop(f.rel, None)
                if old is None or (old[0], old[1]) != (f.size, f.mtime_ns):
                    changed += self._sync_file(f.rel, f.source, old, owners, forgotten)
                if progress:
                    progress("files", n, len(files))
            for gone in known:
                changed += self._sync_file(gone, "", (0, 0, ""), owners, forgotten)
            with self._lock:
                trim_log(conn)
                _db.set_meta(conn, "forgotten", forgotten_sig)
                _db.set_meta(conn, "chunks_version", CHUNKS_VERSION)
                _db.set_meta(conn, "last_sync", datetime.now(UTC).isoformat(timespec="seconds"))
            return changed

    def _sync_file(self, rel: str, source: str, old: tuple | None, owners: Collection[str],
                   forgotten: Matcher) -> int:
        if source in APPEND_ONLY and old is not None:
            grown = self._sync_growth(rel, source, old[0], owners, forgotten)
            if grown is not None:
                return grown
        path = self.workspace / rel
        try:
            st = path.stat()
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            data = None  # deleted (maybe mid-sync): its chunks go
        except OSError as exc:
            logger.warning("recall index: cannot read %s (%s); kept its old chunks", rel, exc)
            return 0
        content_hash = digest(data) if data is not None else ""
        if data is not None and old is not None and old[2] == content_hash:
            with self._lock:
                self.conn().execute("UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?",
                                    (st.st_size, st.st_mtime_ns, rel))
            return 0
        chunks: list[Chunk] = []
        resume: Resume | None = None
        if data is not None:
            chunks, resume = chunk_file(rel, source, data, owner_sessions=owners,
                                        max_tokens=self.chunk_tokens, overlap=self.chunk_overlap)
        chunks, opened = _storable(chunks, resume, forgotten)
        with self._lock:
            conn = self.conn()
            with _db.write_transaction(conn):
                ids = apply_diff(conn, rel, chunks)
                drop_mark(conn, rel)
                if data is None:
                    conn.execute("DELETE FROM files WHERE path = ?", (rel,))
                else:
                    # An append-only file is recorded as read up to what was read, so the next
                    # sync resumes exactly there even if lines were appended since the stat.
                    size = len(data) if resume is not None else st.st_size
                    conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                                 (rel, source, size, st.st_mtime_ns, content_hash))
                    if resume is not None:
                        save_mark(conn, rel, Mark(
                            size, digest(data.split(b"\n", 1)[0]), tail_digest(data), resume,
                            tuple(i for i, o in zip(ids, opened, strict=True) if o)))
        return 1

    def _sync_growth(self, rel: str, source: str, recorded_size: int, owners: Collection[str],
                     forgotten: Matcher) -> int | None:
        """Index what was appended to ``rel`` since the last sync; None when a whole-file
        pass is needed instead (no mark, or the file changed other than by growing)."""
        with self._lock:
            mark = load_mark(self.conn(), rel)
        if mark is None or mark.size != recorded_size:
            return None
        growth = read_growth(self.workspace / rel, mark)
        if growth is None:
            return None
        chunks, resume = chunk_appended(rel, source, growth.first_line, growth.data, mark.resume,
                                        owner_sessions=owners)
        chunks, opened = _storable(chunks, resume, forgotten)
        with self._lock:
            conn = self.conn()
            with _db.write_transaction(conn):
                if load_mark(conn, rel) != mark:  # another process synced it meanwhile
                    return None
                delete_chunks(conn, list(mark.open_ids))
                ids = [insert_chunk(conn, c) for c in chunks]
                conn.execute("UPDATE files SET size = ?, mtime_ns = ?, hash = '' WHERE path = ?",
                             (growth.size, growth.mtime_ns, rel))
                save_mark(conn, rel, Mark(growth.size, mark.head, growth.tail, resume,
                                          tuple(i for i, o in zip(ids, opened, strict=True) if o)))
        return 1

    def _owner_sessions(self) -> set[str]:
        try:
            data = json.loads((self.workspace / "state" / "owner_sessions.json").read_text("utf-8"))
        except (OSError, ValueError):
            return set()
        return {k for k in data if isinstance(k, str)} if isinstance(data, list) else set()

    def purge_forgotten(self, matcher: Matcher) -> int:
        """Drop the chunks holding what ``matcher`` matches, and their cached vectors, now;
        returns how many chunks went. (``sync_files`` keeps tombstoned text out from then on.)"""
        if not matcher:
            return 0
        with self._sync_lock, self._lock:
            conn = self.conn()
            rows = [(cid, h) for cid, h, text in conn.execute("SELECT id, hash, text FROM chunks")
                    if matcher.matches(text)]
            with _db.write_transaction(conn):
                delete_chunks(conn, [cid for cid, _ in rows])
                conn.executemany("DELETE FROM vectors WHERE hash = ?", [(h,) for _, h in rows])
            self.vector_cache = None
        return len(rows)

    # ------------------------------------------------------------------ phase 2: vectors
    @property
    def vectors_on(self) -> bool:
        if self.embedder is None:
            return False
        if self.embed_error is not None and self._failed_at is not None \
                and time.monotonic() - self._failed_at > RETRY_EMBEDDER_S:
            self.embed_error, self._failed_at, self._dim = None, None, None
        return self.embed_error is None

    def _fail(self, why: str) -> None:
        if self.embed_error is None:
            logger.warning("recall index: embedder %s unusable (%s); search is keyword-only",
                           getattr(self.embedder, "model", "?"), why)
        self.embed_error = why
        self._failed_at = time.monotonic()

    def dimension(self) -> int | None:
        """The embedder's dimension (probed once); a change from the stored one re-embeds."""
        if not self.vectors_on or self.embedder is None:
            return None
        if self._dim is None:
            try:
                probe = self.embedder.passages(["dimension probe"])
            except Exception as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                return None
            if probe.ndim != 2 or probe.shape[0] != 1 or probe.shape[1] < 1:
                self._fail(f"unexpected embedding shape {probe.shape}")
                return None
            self._dim = int(probe.shape[1])
            emb = self.embedder
            with self._lock:
                conn = self.conn()
                key = f"dim:{emb.provider}:{emb.model}"
                stored = _db.get_meta(conn, key)
                if stored is not None and int(stored) != self._dim:
                    logger.warning("recall index: %s now returns %d dimensions (was %s); re-embedding",
                                   emb.model, self._dim, stored)
                    conn.execute("DELETE FROM vectors WHERE provider = ? AND model = ?",
                                 (emb.provider, emb.model))
                    log_reset(conn)
                _db.set_meta(conn, key, str(self._dim))
        return self._dim

    def embed_missing(self, progress: Progress | None = None, limit: int | None = None, *,
                      settle_s: float = 0.0) -> int:
        """Embed chunk texts without a cached vector; returns how many were embedded.

        With ``settle_s``, a transcript window still open (its turn half written) in a file
        changed less than ``settle_s`` ago waits: the finished window replaces it within the
        turn, so embedding both would cost a second embedding per turn, and would hold the
        embedder just when the turn's own recall query wants it. Keyword search finds it
        meanwhile. ``self.settling`` says how many texts wait.
        """
        self.settling = 0
        dim = self.dimension()
        emb = self.embedder
        if dim is None or emb is None:
            return 0
        with self._lock:
            conn = self.conn()
            missing = self._unembedded.missing(conn, emb.provider, emb.model)
            waiting = self._settling_ids(conn, self.now_ns() - int(settle_s * 1e9)) \
                if settle_s > 0 else set()
        texts: dict[str, str] = {}
        held: set[str] = set()
        for chunk_id, digest_, text in missing:
            if chunk_id in waiting:
                held.add(digest_)
            else:
                texts.setdefault(digest_, text)
        self.settling = len(held - texts.keys())
        rows = list(texts.items())
        if limit is not None:
            rows = rows[:limit]
        done = 0
        for start in range(0, len(rows), self.batch_size):
            if self.cancel.is_set():
                return done
            batch = rows[start:start + self.batch_size]
            try:
                matrix = emb.passages([text for _, text in batch])
            except EmbedderError as exc:
                self._fail(str(exc))
                return done
            except Exception as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                return done
            import numpy as np  # only when vectors are written: numpy loads lazily

            if matrix.ndim != 2 or matrix.shape != (len(batch), dim) or not np.isfinite(matrix).all():
                self._fail(f"returned vectors of shape {matrix.shape}, expected ({len(batch)}, {dim})")
                return done
            with self._lock:
                conn = self.conn()
                with _db.write_transaction(conn):
                    conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?, ?)",
                                     [(emb.provider, emb.model, h, dim,
                                       matrix[i].astype(np.float32).tobytes())
                                      for i, (h, _) in enumerate(batch)])
                    marks = ",".join("?" * len(batch))
                    log_added(conn, [row[0] for row in conn.execute(
                        f"SELECT id FROM chunks WHERE hash IN ({marks})", [h for h, _ in batch])])
            done += len(batch)
            if progress:
                progress("embeddings", done, len(rows))
        return done

    @staticmethod
    def _settling_ids(conn: sqlite3.Connection, since: int) -> set[int]:
        """Chunks still open in append-only files changed after ``since`` (ns)."""
        ids: set[int] = set()
        for (open_ids,) in conn.execute(
                "SELECT a.open_ids FROM appended a JOIN files f ON f.path = a.path "
                "WHERE f.mtime_ns > ? AND a.open_count > 0", (since,)):
            ids.update(json.loads(open_ids))
        return ids

    def sync(self, progress: Progress | None = None) -> None:
        self.sync_files(progress)
        self.embed_missing(progress)

    # ------------------------------------------------------------------ figures
    def status(self) -> dict[str, Any]:
        with self._lock:
            conn = self.conn()
            chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
            last = _db.get_meta(conn, "last_sync")
            vectors = 0
            if self.embedder is not None:
                vectors = conn.execute(
                    "SELECT count(DISTINCT c.hash) FROM chunks c JOIN vectors v ON v.hash = c.hash "
                    "AND v.provider = ? AND v.model = ?",
                    (self.embedder.provider, self.embedder.model)).fetchone()[0]
        if self.embedder is None:
            embedder = f"keyword-only ({self.keyword_only_reason})"
        elif not self.vectors_on:
            embedder = f"keyword-only ({self.embedder.model} failed: {self.embed_error})"
        else:
            embedder = f"{self.embedder.provider}/{self.embedder.model}"
        return {"chunks": chunks, "files": files, "embedded": vectors, "embedder": embedder,
                "vectors_on": self.vectors_on, "last_sync": last}

    def status_line(self) -> str:
        s = self.status()
        return (f"recall index: {s['chunks']:,} chunks from {s['files']} files, "
                f"embedder {s['embedder']}, last sync {s['last_sync'] or 'never'}")


def _storable(chunks: list[Chunk], resume: Resume | None,
              forgotten: Matcher) -> tuple[list[Chunk], list[bool]]:
    """The chunks to store, without what the owner forgot, and which may still change (the
    last ``resume.open`` of the file's chunks)."""
    first_open = len(chunks) - (resume.open if resume is not None else 0)
    kept = [(c, i >= first_open) for i, c in enumerate(chunks) if not (forgotten and forgotten.matches(c.text))]
    return [c for c, _ in kept], [o for _, o in kept]
