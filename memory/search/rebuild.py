"""``lucid memory reindex``: build a fresh index in a temp file, then swap it in atomically.

The fresh index is built beside the live one (reusing the live embedding cache, so only
new texts are embedded), while the gateway keeps searching the old one. The swap is a
single SQLite transaction that replaces the live tables with the fresh ones: a reader in
any process sees either the whole old index or the whole new one. (Renaming the file over
a WAL database another process holds open is unsafe — that process's next close deletes
the new file's WAL by name — so the file itself is replaced only when the live one is
corrupt.)
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from lucidgate.memory.search import _db
from lucidgate.memory.search._rows import log_reset
from lucidgate.memory.search.index import MemoryIndex, Progress

logger = logging.getLogger(__name__)

__all__ = ["rebuild"]

# Chunk ids are copied as they are, so the marks of append-only files stay valid.
_TABLES = ("files", "chunks", "vectors", "appended")


def rebuild(live: MemoryIndex, progress: Progress | None = None) -> dict:
    """Rebuild ``live``'s index from the files; returns the new status figures."""
    tmp = live.path.with_name(f"{live.path.name}.rebuild-{os.getpid()}")
    _db.remove_db_files(tmp)
    fresh = MemoryIndex(live.workspace, embedder=live.embedder, sources=live.sources,
                        chunk_tokens=live.chunk_tokens, chunk_overlap=live.chunk_overlap,
                        batch_size=live.batch_size, path=tmp,
                        keyword_only_reason=live.keyword_only_reason)
    fresh._dim = live.dimension()  # same embedder: no second probe
    try:
        _copy_embedding_cache(live, fresh)
        fresh.sync(progress)
        fresh.close()
        _swap(live, tmp)
    finally:
        fresh.close()
        _db.remove_db_files(tmp)
    return live.status()


def _copy_embedding_cache(live: MemoryIndex, fresh: MemoryIndex) -> None:
    try:
        with live._lock:
            rows = live.conn().execute("SELECT * FROM vectors").fetchall()
    except sqlite3.DatabaseError as exc:
        logger.warning("recall index: old embedding cache unreadable (%s); re-embedding all", exc)
        return
    conn = fresh.conn()
    conn.execute("BEGIN")
    conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?, ?)", rows)
    conn.execute("COMMIT")


def _swap(live: MemoryIndex, tmp: Path) -> None:
    with live._lock:
        try:
            conn = live.conn()
            conn.execute("ATTACH DATABASE ? AS fresh", (str(tmp),))
        except sqlite3.DatabaseError:
            live.close()
            os.replace(tmp, live.path)
            return
        try:
            with _db.write_transaction(conn):
                for table in _TABLES:
                    conn.execute(f"DELETE FROM main.{table}")
                    conn.execute(f"INSERT INTO main.{table} SELECT * FROM fresh.{table}")
                conn.execute("DELETE FROM main.chunks_fts")
                conn.execute("INSERT INTO main.chunks_fts (rowid, body) "
                             "SELECT rowid, body FROM fresh.chunks_fts")
                conn.execute("INSERT OR REPLACE INTO main.meta SELECT * FROM fresh.meta "
                             "WHERE key NOT IN ('schema', 'generation')")
                conn.execute("DELETE FROM main.vector_log")
                log_reset(conn)  # every reader reloads its vectors once
        finally:
            conn.execute("DETACH DATABASE fresh")
        live.vector_cache = None
