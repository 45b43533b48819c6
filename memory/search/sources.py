"""Which workspace files the recall index reads, and how each becomes chunks.

    SOUL.md, USER.md, memory/MEMORY.md          source "memory"   (evergreen, owner's)
    memory/*.md (memory/YYYY-MM-DD.md dated)    source "notes"    (owner's)
    memory/shared/*.md                          source "notes"    (a shared chat's: guest material)
    memory/history.jsonl, memory/archive/*.jsonl source "history"
    sessions/*.jsonl (and *.jsonl.old after /new)  source "session"

A file that is not UTF-8 text (binary junk dropped into memory/), or whose name is not,
yields no chunks and a warning; it is never an error for the sync as a whole.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from lucidgate.memory.search.chunking import (
    Chunk,
    Resume,
    chunk_history,
    chunk_markdown,
    chunk_transcript,
    transcript_head,
)
from lucidgate.memory.gitpaths import printable_name, representable
from lucidgate.memory.search.origin import origin_of
from lucidgate.memory.session_note import SHARED_NOTES_DIR, shared_note_key

logger = logging.getLogger(__name__)

__all__ = ["APPEND_ONLY", "SourceFile", "chunk_appended", "chunk_file", "daily_notes_summary", "discover", "note_date", "source_of"]

EVERGREEN = ("SOUL.md", "USER.md", "memory/MEMORY.md")
# Sources written only by appending lines: a sync re-reads what was appended, not the file.
APPEND_ONLY = ("history", "session")
_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[-_ .].*)?\.md$")


@dataclass(frozen=True, slots=True)
class SourceFile:
    rel: str  # workspace-relative, "/" separated
    source: str
    size: int
    mtime_ns: int


def source_of(rel: str) -> str | None:
    if rel in EVERGREEN:
        return "memory"
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] == "memory" and parts[1].endswith(".md"):
        return "notes"
    if len(parts) == 3 and parts[:2] == ["memory", "shared"] and parts[2].endswith(".md"):
        return "notes"
    if rel == "memory/history.jsonl" or (
            len(parts) == 3 and parts[:2] == ["memory", "archive"] and parts[2].endswith(".jsonl")):
        return "history"
    if len(parts) == 2 and parts[0] == "sessions" and parts[1].endswith((".jsonl", ".jsonl.old")):
        return "session"
    return None


# What is read, in order: a named file, or a folder's files with a name ending.
_ORDER: tuple[str | tuple[str, str], ...] = (
    *EVERGREEN, ("memory", ".md"), ("memory/shared", ".md"), "memory/history.jsonl",
    ("memory/archive", ".jsonl"), ("sessions", ".jsonl"), ("sessions", ".jsonl.old"))


def discover(workspace: Path, sources: Collection[str]) -> Iterator[SourceFile]:
    """Every indexable file with its size and mtime, in a stable order.

    A sync runs after every turn and stats every file of memory: at years of chats (~800
    chat files) path objects, globbing and a second ``stat`` per file for ``is_file`` were
    most of the sync's time, so folders are listed with ``os.scandir`` (an entry knows
    whether it is a file without a system call) and each file is stat-ed once."""
    seen: set[str] = set()
    for item in _ORDER:
        for rel in [item] if isinstance(item, str) else _listed(workspace, *item):
            found = _found(workspace, rel, sources, seen)
            if found is not None:
                yield found


def _listed(workspace: Path, folder: str, ending: str) -> list[str]:
    """The workspace-relative names of ``folder``'s files ending in ``ending``, sorted."""
    try:
        with os.scandir(workspace / folder) as entries:
            names = [e.name for e in entries if e.name.endswith(ending) and e.is_file()]
    except OSError:
        return []
    return [f"{folder}/{name}" for name in sorted(names)]


def _found(workspace: Path, rel: str, sources: Collection[str], seen: set[str]) -> SourceFile | None:
    source = source_of(rel)
    if rel in seen or source is None or source not in sources:
        return None
    if not representable(rel):  # no hit, citation or answer could name it
        logger.warning("recall index: %s has a name that is not UTF-8; not indexed (rename it)",
                       printable_name(rel))
        return None
    seen.add(rel)
    try:
        st = os.stat(workspace / rel)
    except OSError:
        return None  # deleted meanwhile
    if not stat.S_ISREG(st.st_mode):
        return None
    return SourceFile(rel, source, st.st_size, st.st_mtime_ns)


def note_date(rel: str) -> str | None:
    match = _DATED.match(rel.rsplit("/", 1)[-1])
    return match.group(1) if match else None


def chunk_file(rel: str, source: str, data: bytes, *, owner_sessions: Collection[str],
               max_tokens: int, overlap: int) -> tuple[list[Chunk], Resume | None]:
    """The chunks of one file's bytes (empty for junk), and for an append-only source
    (``APPEND_ONLY``) where to resume when lines are appended."""
    if source in ("memory", "notes"):
        if b"\x00" in data[:65536]:
            logger.warning("recall index: %s looks binary; not indexed", rel)
            return [], None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            logger.warning("recall index: %s is not UTF-8 text; not indexed", rel)
            return [], None
        date = note_date(rel) if source == "notes" else None
        chunks = chunk_markdown(text, source=source, path=rel, date=date,
                                max_tokens=max_tokens, overlap=overlap)
        if rel.startswith(SHARED_NOTES_DIR + "/"):
            # A shared chat's note: that chat's material, a guest's — never the owner's.
            key = shared_note_key(text)
            chunks = [replace(c, session_key=key, chat_type="group", owner=False,
                              origin="guest" if key else "unknown") for c in chunks]
        return chunks, None
    return chunk_appended(rel, source, data.split(b"\n", 1)[0], data, Resume(0, 0, 0),
                          owner_sessions=owner_sessions)


def chunk_appended(rel: str, source: str, first_line: bytes, data: bytes, resume: Resume, *,
                   owner_sessions: Collection[str]) -> tuple[list[Chunk], Resume]:
    """Chunks of an append-only file's bytes from ``resume.offset`` on (``data``); a
    transcript's provenance comes from its first line."""
    if source == "history":
        chunks, nxt = chunk_history(data, path=rel, offset=resume.offset)
        return [_with_history_owner(c, owner_sessions) for c in chunks], nxt
    head = transcript_head(first_line)
    if head is None:
        return [], Resume(resume.offset + data.rfind(b"\n") + 1, resume.said, 0,
                          resume.line + data.count(b"\n"))
    return chunk_transcript(data, head, path=rel, owner=head.key in owner_sessions,
                            offset=resume.offset, said=resume.said, line=resume.line)


def _with_history_owner(chunk: Chunk, owner_sessions: Collection[str]) -> Chunk:
    """Entries written before provenance was recorded: derive it from the session key (an
    entry with no session is of unknown origin, and so untrusted)."""
    if chunk.origin != "unknown" or chunk.session_key is None:
        return chunk
    channel = chunk.channel or chunk.session_key.split(":", 1)[0]
    owner = chunk.session_key in owner_sessions
    return replace(chunk, channel=channel, owner=owner,
                   origin=origin_of(chunk.session_key, channel, owner))


def daily_notes_summary(workspace: Path, limit: int = 7) -> str:
    """``/memory``'s list of the newest daily notes, newest first, with their first line."""
    folder = workspace / "memory"
    notes = sorted((p for p in folder.glob("*.md") if note_date(p.name)), reverse=True) \
        if folder.is_dir() else []
    lines = []
    for path in notes[:limit]:
        try:
            first = next((ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()
                          if ln.strip() and not ln.lstrip().startswith("#")), "")
        except (OSError, UnicodeDecodeError):
            first = "(unreadable)"
        lines.append(f"- {path.name}: {first[:120]}")
    if len(notes) > limit:
        lines.append(f"- … and {len(notes) - limit} older note(s)")
    return "\n".join(lines)
