"""Where the recall index resumes reading an append-only source (transcripts, history).

A turn appends a few lines to a transcript that may hold thousands. Re-reading and
re-chunking the whole file on every change made each turn's index work grow with the
session. So for each append-only file the index keeps a ``Mark``: how many bytes it has
read, digests of the file's first line and of the last bytes read, where chunking resumes
(``chunking.Resume``) and the ids of the chunks that may still change. When the file has
only grown and both digests still match, a sync reads from the resume offset on and
replaces just those chunks. Anything else (a rewritten header, archived history, a file
that shrank) fails the check, and the caller falls back to a whole-file pass, which is
always correct.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from lucidgate.memory.search.chunking import Resume

__all__ = ["Growth", "Mark", "digest", "drop_mark", "load_mark", "read_growth", "save_mark", "tail_digest"]

# How much of what was read last time must be unchanged (besides the first line).
TAIL_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Mark:
    size: int  # bytes read
    head: str  # digest of the first line
    tail: str  # digest of the last TAIL_BYTES read
    resume: Resume
    open_ids: tuple[int, ...]  # chunk rows made again from resume.offset


@dataclass(frozen=True, slots=True)
class Growth:
    first_line: bytes
    data: bytes  # the file from mark.resume.offset on
    size: int
    mtime_ns: int
    tail: str


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def tail_digest(data: bytes) -> str:
    return digest(data[-TAIL_BYTES:])


def load_mark(conn: sqlite3.Connection, rel: str) -> Mark | None:
    row = conn.execute("SELECT size, head, tail, resume_offset, resume_said, open_count, open_ids, "
                       "resume_line FROM appended WHERE path = ?", (rel,)).fetchone()
    if row is None or row[7] is None:  # no mark, or one from before lines were kept
        return None
    return Mark(row[0], row[1], row[2], Resume(row[3], row[4], row[5], row[7]),
                tuple(json.loads(row[6])))


def save_mark(conn: sqlite3.Connection, rel: str, mark: Mark) -> None:
    conn.execute("INSERT OR REPLACE INTO appended (path, size, head, tail, resume_offset, "
                 "resume_said, open_count, open_ids, resume_line) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (rel, mark.size, mark.head, mark.tail, mark.resume.offset, mark.resume.said,
                  mark.resume.open, json.dumps(list(mark.open_ids)), mark.resume.line))


def drop_mark(conn: sqlite3.Connection, rel: str) -> None:
    conn.execute("DELETE FROM appended WHERE path = ?", (rel,))


def read_growth(path: Path, mark: Mark) -> Growth | None:
    """What was appended since ``mark``, or None when the file changed any other way."""
    try:
        with path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size < mark.size:
                return None
            first_line = fh.readline().rstrip(b"\n")
            if digest(first_line) != mark.head:
                return None
            start = max(0, mark.size - TAIL_BYTES)
            fh.seek(start)
            if digest(fh.read(mark.size - start)) != mark.tail:
                return None
            fh.seek(mark.resume.offset)
            data = fh.read()
            size = mark.resume.offset + len(data)
            tail = data
            if len(data) < TAIL_BYTES:
                fh.seek(max(0, size - TAIL_BYTES))
                tail = fh.read(size - max(0, size - TAIL_BYTES))
    except OSError:
        return None  # gone or unreadable: the whole-file pass decides what that means
    return Growth(first_line, data, size, st.st_mtime_ns, tail_digest(tail))
