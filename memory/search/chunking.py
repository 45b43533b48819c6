"""Turning memory sources into search chunks, each with exact provenance.

Three shapes, because the sources differ:

- markdown (MEMORY.md, USER.md, SOUL.md, notes): paragraphs packed into chunks of about
  ``max_tokens`` with ``overlap`` tokens carried over, a heading always starting a new
  chunk; every chunk knows its exact first and last line (1-based, inclusive), so
  ``memory_get`` can return precisely what a hit points at;
- history (``history.jsonl`` and its archive): one chunk per entry, keyed by cursor;
- transcripts: small windows of user/assistant text (tool traffic left out).

Token counts are estimated (one per CJK character, one per four other characters): a
chunk boundary needs to be about right, not exact, and tiktoken on a 5 MB file is slow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["Chunk", "chunk_history", "chunk_markdown", "chunk_transcript", "estimate_tokens"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
# A transcript message longer than this is cut: a window is a pointer into the log, not a copy.
_MESSAGE_CHARS = 1200
WINDOW_MESSAGES = 4
WINDOW_STRIDE = 2


@dataclass(frozen=True, slots=True)
class Chunk:
    source: str  # memory | notes | history | session
    path: str  # workspace-relative, "/" separated
    text: str
    start_line: int | None = None
    end_line: int | None = None
    cursor: int | None = None
    session_key: str | None = None
    date: str | None = None  # ISO date, None for evergreen files
    channel: str | None = None
    chat_type: str | None = None
    owner: bool = True


def estimate_tokens(text: str) -> int:
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


@dataclass(slots=True)
class _Unit:
    start: int
    end: int
    text: str
    tokens: int
    heading: bool


def _units(lines: list[str], max_tokens: int) -> Iterator[_Unit]:
    """Paragraphs (runs of non-blank lines), split by line or by characters when too big."""
    block: list[int] = []

    def emit(indices: list[int]) -> Iterator[_Unit]:
        text = "\n".join(lines[i] for i in indices)
        tokens = estimate_tokens(text)
        heading = bool(_HEADING.match(lines[indices[0]]))
        if tokens <= max_tokens:
            yield _Unit(indices[0] + 1, indices[-1] + 1, text, tokens, heading)
            return
        for i in indices:
            line = lines[i]
            line_tokens = estimate_tokens(line)
            if line_tokens <= max_tokens:
                yield _Unit(i + 1, i + 1, line, line_tokens, bool(_HEADING.match(line)))
                continue
            step = max(1, len(line) * max_tokens // line_tokens)
            for pos in range(0, len(line), step):
                piece = line[pos:pos + step]
                yield _Unit(i + 1, i + 1, piece, estimate_tokens(piece), False)

    for index, line in enumerate(lines):
        if _HEADING.match(line) and block:
            yield from emit(block)
            block = []
        if line.strip():
            block.append(index)
        elif block:
            yield from emit(block)
            block = []
    if block:
        yield from emit(block)


def chunk_markdown(text: str, *, source: str, path: str, date: str | None = None,
                   max_tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    lines = text.splitlines()
    chunks: list[Chunk] = []
    current: list[_Unit] = []
    size = 0

    def flush() -> None:
        if not current:
            return
        start, end = current[0].start, current[-1].end
        if all(u.start != u.end or u.text == lines[u.start - 1] for u in current):
            body = "\n".join(lines[start - 1:end])  # whole lines: exactly what the range holds
        else:
            body = "\n".join(u.text for u in current)  # pieces of one overlong line
        chunks.append(Chunk(source, path, body, start_line=start, end_line=end, date=date))

    for unit in _units(lines, max_tokens):
        if unit.heading and current and not all(u.heading for u in current):
            flush()
            current, size = [], 0
        elif current and size + unit.tokens > max_tokens:
            flush()
            carried: list[_Unit] = []
            budget = overlap
            for prev in reversed(current):
                if prev.tokens > budget or prev.heading:
                    break
                carried.insert(0, prev)
                budget -= prev.tokens
            current, size = carried, sum(u.tokens for u in carried)
        current.append(unit)
        size += unit.tokens
    flush()
    return chunks


def chunk_history(raw_lines: Iterable[bytes], *, path: str) -> list[Chunk]:
    """One chunk per well-formed entry; provenance fields are taken when recorded."""
    chunks: list[Chunk] = []
    for raw in raw_lines:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        cursor, content = data.get("cursor"), data.get("content")
        if type(cursor) is not int or not isinstance(content, str) or not content.strip():
            continue
        stamp = data.get("timestamp")
        key = data.get("session_key")
        owner = data.get("owner")
        chunks.append(Chunk(
            "history", path, content.strip(), cursor=cursor,
            session_key=key if isinstance(key, str) else None,
            date=stamp[:10] if isinstance(stamp, str) and len(stamp) >= 10 else None,
            channel=_str_or_none(data.get("channel")), chat_type=_str_or_none(data.get("chat_type")),
            owner=owner if isinstance(owner, bool) else True,
        ))
    return chunks


def chunk_transcript(raw_lines: Iterable[bytes], *, path: str, owner: bool) -> list[Chunk]:
    """Windows of ``WINDOW_MESSAGES`` user/assistant texts, advancing ``WINDOW_STRIDE``."""
    key: str | None = None
    origin: dict = {}
    said: list[tuple[str, str]] = []  # (line text, timestamp)
    for raw in raw_lines:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        if data.get("_type") == "metadata":
            key = _str_or_none(data.get("key"))
            meta = data.get("metadata")
            origin = (meta.get("origin") or {}) if isinstance(meta, dict) else {}
            continue
        role, content = data.get("role"), data.get("content")
        if role not in ("user", "assistant") or data.get("status") in ("error", "cancelled"):
            continue
        if not isinstance(content, str) or not content.strip():
            continue
        text = content.strip()
        if len(text) > _MESSAGE_CHARS:
            text = text[:_MESSAGE_CHARS] + "…"
        stamp = data.get("timestamp")
        said.append((f"{role}: {text}", stamp if isinstance(stamp, str) else ""))
    if key is None or not isinstance(origin, dict):
        return []
    chunks: list[Chunk] = []
    starts = range(0, max(1, len(said) - WINDOW_MESSAGES + WINDOW_STRIDE), WINDOW_STRIDE)
    for start in starts:
        window = said[start:start + WINDOW_MESSAGES]
        if not window:
            break
        stamp = window[0][1]
        chunks.append(Chunk(
            "session", path, "\n".join(t for t, _ in window), session_key=key,
            date=stamp[:10] if len(stamp) >= 10 else None,
            channel=_str_or_none(origin.get("channel")), chat_type=_str_or_none(origin.get("chat_type")),
            owner=owner,
        ))
    return chunks


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
