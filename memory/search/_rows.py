"""Writing the recall index's chunk rows (with their FTS rows) for one file.

Chunk ids are the FTS rowids, so every insert or delete touches both tables together, and
is written to ``vector_log`` too, so that searches can update their in-memory vectors
instead of reloading them (``memory.search.vector_cache``).
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import astuple

from lucidgate.memory.search.chunking import Chunk
from lucidgate.memory.search.fts_text import fts_text

__all__ = ["ADDED", "DELETED", "LOG_KEEP", "RESET", "apply_diff", "chunk_hash", "delete_chunks",
           "insert_chunk", "log_added", "log_reset", "trim_log"]

# vector_log operations: a chunk added or given a vector; deleted; anything may have changed.
ADDED, DELETED, RESET = 1, 0, 2
LOG_KEEP = 20_000


def chunk_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def apply_diff(conn: sqlite3.Connection, rel: str, chunks: list[Chunk]) -> list[int]:
    """Make ``rel``'s rows equal ``chunks``, keeping unchanged rows; their ids in order."""
    existing: dict[tuple, list[int]] = {}
    for row in conn.execute(
            "SELECT id, source, path, text, start_line, end_line, cursor, session_key, date, "
            "channel, chat_type, owner, origin FROM chunks WHERE path = ?", (rel,)):
        key = (row[1], row[2], row[3], *row[4:11], bool(row[11]), row[12])
        existing.setdefault(key, []).append(row[0])
    ids: list[int | None] = []
    for chunk in chunks:
        kept = existing.get(astuple(chunk))
        ids.append(kept.pop() if kept else None)
    delete_chunks(conn, [i for kept in existing.values() for i in kept])
    return [i if i is not None else insert_chunk(conn, c) for i, c in zip(ids, chunks, strict=True)]


def delete_chunks(conn: sqlite3.Connection, ids: list[int]) -> None:
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        marks = ",".join("?" * len(part))
        conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
        conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", part)
    conn.executemany("INSERT INTO vector_log (chunk_id, op) VALUES (?, ?)", [(i, DELETED) for i in ids])


def insert_chunk(conn: sqlite3.Connection, c: Chunk) -> int:
    cur = conn.execute(
        "INSERT INTO chunks (path, source, hash, text, start_line, end_line, cursor, "
        "session_key, date, channel, chat_type, owner, origin) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (c.path, c.source, chunk_hash(c.text), c.text, c.start_line, c.end_line, c.cursor,
         c.session_key, c.date, c.channel, c.chat_type, int(c.owner), c.origin))
    row_id = cur.lastrowid
    assert row_id is not None  # an INSERT always sets it
    conn.execute("INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)", (row_id, fts_text(c.text)))
    log_added(conn, [row_id])
    return row_id


def log_added(conn: sqlite3.Connection, chunk_ids: list[int]) -> None:
    conn.executemany("INSERT INTO vector_log (chunk_id, op) VALUES (?, ?)", [(i, ADDED) for i in chunk_ids])


def log_reset(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (0, ?)", (RESET,))


def trim_log(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM vector_log WHERE seq <= (SELECT max(seq) FROM vector_log) - ?", (LOG_KEEP,))
