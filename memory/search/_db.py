"""The recall index's SQLite file: schema, opening, and recovering from corruption.

One file, ``memory/index.sqlite``, a derived cache (deleting it loses nothing). WAL mode
and a busy timeout let the gateway and a CLI process read and write it at the same time.

    meta(key, value)                      schema version, last sync, embedder
    files(path, source, size, mtime_ns, hash)
    chunks(id, path, source, hash, text, start_line, end_line, cursor, session_key,
           date, channel, chat_type, owner, origin)  provenance on every chunk
                                          (origin: memory.search.origin)
    chunks_fts(body)                      FTS5, rowid = chunks.id
    vectors(provider, model, hash, dim, vec)         the embedding cache (float32 blobs)
    appended(path, size, head, tail, resume_…, open_…, resume_line)  where append-only files resume
                                                       (memory.search.appended)
    vector_log(seq, chunk_id, op)         what changed, for in-memory vectors
                                          (memory.search.vector_cache)
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
BUSY_TIMEOUT_MS = 15_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, source TEXT NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL, source TEXT NOT NULL, hash TEXT NOT NULL,
    text TEXT NOT NULL, start_line INTEGER, end_line INTEGER, cursor INTEGER,
    session_key TEXT, date TEXT, channel TEXT, chat_type TEXT, owner INTEGER NOT NULL,
    origin TEXT NOT NULL DEFAULT 'unknown');
CREATE INDEX IF NOT EXISTS chunks_path ON chunks(path);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(hash);
CREATE INDEX IF NOT EXISTS chunks_session ON chunks(session_key);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    body, tokenize = 'porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS vectors (
    provider TEXT NOT NULL, model TEXT NOT NULL, hash TEXT NOT NULL, dim INTEGER NOT NULL,
    vec BLOB NOT NULL, PRIMARY KEY (provider, model, hash));
CREATE TABLE IF NOT EXISTS appended (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, head TEXT NOT NULL, tail TEXT NOT NULL,
    resume_offset INTEGER NOT NULL, resume_said INTEGER NOT NULL, open_count INTEGER NOT NULL,
    open_ids TEXT NOT NULL, resume_line INTEGER);
CREATE TABLE IF NOT EXISTS vector_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL, op INTEGER NOT NULL);
"""


def connect(path: Path, *, wal: bool = True) -> sqlite3.Connection:
    """Open (creating) the index; raises sqlite3.DatabaseError when the file is corrupt."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False,
                           isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if wal:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        version = _schema_version(conn)
        if version is not None and version != SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"index schema {version} is not {SCHEMA_VERSION}")
        conn.executescript(_SCHEMA)
        _add_origin(conn)
        _add_resume_line(conn)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'probe'").fetchone()
    except sqlite3.DatabaseError:
        conn.close()
        raise
    return conn


def _add_origin(conn: sqlite3.Connection) -> None:
    """An index made before chunks had an ``origin``: add the column (every old row "unknown",
    so untrusted) and forget what was read, so the next sync re-chunks every file and gives
    each row its origin. Embeddings are kept: they are cached by text."""
    def has_origin() -> bool:
        return any(row[1] == "origin" for row in conn.execute("PRAGMA table_info(chunks)"))

    if has_origin():
        return
    with write_transaction(conn):
        if has_origin():  # another process migrated it meanwhile
            return
        conn.execute("ALTER TABLE chunks ADD COLUMN origin TEXT NOT NULL DEFAULT 'unknown'")
        conn.execute("DELETE FROM files")
        conn.execute("DELETE FROM appended")
    logger.info("recall index: chunks now record their origin; re-reading the memory files once")


def _add_resume_line(conn: sqlite3.Connection) -> None:
    """An index made before transcript windows knew their lines: add ``appended.resume_line``.
    Old marks get NULL, which ``appended.load_mark`` treats as no mark (a whole-file pass), so
    nothing is rebuilt or re-embedded."""
    def has_it() -> bool:
        return any(row[1] == "resume_line" for row in conn.execute("PRAGMA table_info(appended)"))

    if has_it():
        return
    with write_transaction(conn):
        if not has_it():  # another process may have added it meanwhile
            conn.execute("ALTER TABLE appended ADD COLUMN resume_line INTEGER")


def _schema_version(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return row[0] if row else None


def connect_or_rebuild(path: Path) -> sqlite3.Connection:
    """Open the index; a corrupt or foreign file is moved aside with a warning and rebuilt."""
    try:
        return connect(path)
    except sqlite3.DatabaseError as exc:
        logger.warning("recall index %s is unusable (%s); rebuilding it from the memory files",
                       path, exc)
        remove_db_files(path, keep_aside=True)
        return connect(path)


def remove_db_files(path: Path, *, keep_aside: bool = False) -> None:
    if keep_aside and path.exists():
        os.replace(path, path.with_name(path.name + ".corrupt"))
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (key, value))


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any error: the write lock is taken
    up front, so processes syncing at once queue instead of failing half-way."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
