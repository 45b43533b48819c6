"""Turning memory sources into search chunks, each with exact provenance.

Three shapes, because the sources differ:

- markdown (MEMORY.md, USER.md, SOUL.md, notes): paragraphs packed into chunks of about
  ``max_tokens`` with ``overlap`` tokens carried over, a heading always starting a new
  chunk; every chunk knows its exact first and last line (1-based, inclusive), so
  ``memory_get`` can return precisely what a hit points at;
- history (``history.jsonl`` and its archive): one chunk per entry, keyed by cursor;
- transcripts: small windows of user/assistant text, not overlapping (tool traffic left out),
  each with the file lines it spans, so ``memory_get`` opens the exchange around a hit.

A history entry and a transcript window start with a line saying when (``when.stamp_line``):
the date is part of what is searched and of what the reader of a hit sees.

Token counts are estimated (one per CJK character, one per four other characters): a
chunk boundary needs to be about right, not exact, and tiktoken on a 5 MB file is slow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from lucidgate.memory._history_index import parse_entry
from lucidgate.memory.search.origin import TRUSTED, origin_of
from lucidgate.memory.search.fts_text import CJK_RUN
from lucidgate.memory.search.when import stamp_line
from lucidgate.memory.speakers import is_shared, label_of

__all__ = ["CHUNKS_VERSION", "Chunk", "Resume", "TranscriptHead", "chunk_history", "chunk_markdown", "chunk_transcript",
           "estimate_tokens", "transcript_head"]

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
# A transcript message longer than this is cut: a window is a pointer into the log, not a copy.
_MESSAGE_CHARS = 1200
# Windows of four texts (two exchanges) that do not overlap: every message is embedded
# once. Overlapping windows (stride 2) embedded each message twice, which doubled the CPU
# the bundled embedder spends per turn (about 1 ms per token) for little: an exchange
# stays whole in a window unless extra assistant texts shift the pairs.
# Changes when the same file would now give different chunks; the index re-chunks every
# file once when it differs from the version it recorded (2: date lines, transcript lines).
CHUNKS_VERSION = "3"  # 3: a shared chat's lines name their speakers; guest lines never owner's
WINDOW_MESSAGES = 4
WINDOW_STRIDE = 4


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
    origin: str = "unknown"  # memory.search.origin: owner | guest | tool | import | unknown


def estimate_tokens(text: str) -> int:
    cjk = sum(map(len, CJK_RUN.findall(text)))
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
        chunks.append(Chunk(source, path, body, start_line=start, end_line=end, date=date,
                            origin=TRUSTED))

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


def chunk_history(data: bytes, *, path: str, offset: int = 0) -> tuple[list[Chunk], Resume]:
    """One chunk per well-formed entry of ``data`` (the file from byte ``offset`` on);
    provenance fields are taken when recorded."""
    chunks: list[Chunk] = []
    open_ = 0
    for _at, raw, ended in _lines(data, offset):
        chunk = _history_entry(raw, path)
        if chunk is not None:
            chunks.append(chunk)
            open_ += not ended  # a line still being written is read again next time
    return chunks, Resume(_complete_end(data, offset), 0, open_)


def _history_entry(raw: bytes, path: str) -> Chunk | None:
    """A well-formed history entry (the one definition, ``memory._history_index``) with text."""
    entry = parse_entry(raw)
    if entry is None or not entry.content.strip():
        return None
    stamp = entry.timestamp
    when = stamp_line(stamp)
    text = entry.content.strip()
    return Chunk(
        "history", path, f"{when}\n{text}" if when else text, cursor=entry.cursor,
        session_key=entry.session_key,
        date=stamp[:10] if len(stamp) >= 10 else None, channel=entry.channel,
        chat_type=entry.chat_type, owner=bool(entry.owner),
        origin=origin_of(entry.session_key, entry.channel, entry.owner),
    )


@dataclass(frozen=True, slots=True)
class Resume:
    """Where re-chunking an append-only JSONL file starts next time.

    Every chunk made from bytes before ``offset`` is final: appending lines cannot change
    it. The last ``open`` chunks made may still change (a transcript window not yet full,
    an entry on a line without its newline) and are made again from ``offset``.
    """

    offset: int  # byte offset of the first line to read again
    said: int  # transcripts: index, among user/assistant texts, of the text at ``offset``
    open: int
    line: int = 1  # transcripts: the 1-based line number at ``offset``


@dataclass(frozen=True, slots=True)
class TranscriptHead:
    key: str
    channel: str | None
    chat_type: str | None
    imported: bool = False  # written by ``lucid import``


def transcript_head(first_line: bytes) -> TranscriptHead | None:
    """A transcript's metadata line; None when the file has none (it is not indexed)."""
    try:
        data = json.loads(first_line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("_type") != "metadata":
        return None
    key, meta = _str_or_none(data.get("key")), data.get("metadata")
    origin = (meta.get("origin") or {}) if isinstance(meta, dict) else {}
    if key is None or not isinstance(origin, dict):
        return None
    return TranscriptHead(key, _str_or_none(origin.get("channel")), _str_or_none(origin.get("chat_type")),
                          imported=bool(meta.get("imported_from")) if isinstance(meta, dict) else False)


def _lines(data: bytes, base: int) -> Iterator[tuple[int, bytes, bool]]:
    """(absolute offset, line, ended by a newline) for each line of ``data``."""
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            yield base + pos, data[pos:], False
            return
        yield base + pos, data[pos:end], True
        pos = end + 1


def _complete_end(data: bytes, base: int) -> int:
    return base + data.rfind(b"\n") + 1


def chunk_transcript(data: bytes, head: TranscriptHead, *, path: str, owner: bool,
                     offset: int = 0, said: int = 0, line: int = 1) -> tuple[list[Chunk], Resume]:
    """Windows of ``WINDOW_MESSAGES`` user/assistant texts, advancing ``WINDOW_STRIDE``.

    ``data`` holds the file from byte ``offset`` on, where text number ``said`` starts (both
    0 for a whole file; a ``Resume`` from the previous call otherwise; ``line`` is the line
    number at ``offset``): the windows made are
    exactly those a whole-file pass makes from text ``said`` on, so appending a turn costs
    that turn, not the transcript.
    """
    # (line text, timestamp, line offset, line number, written by a guest)
    texts: list[tuple[str, str, int, int, bool]] = []
    complete = 0  # texts on lines that have their newline
    shared = is_shared(head.chat_type)
    for number, (at, raw, ended) in enumerate(_lines(data, offset), line):
        said_text = _said_text(raw, shared=shared)
        if said_text is not None:
            texts.append((said_text[0], said_text[1], at, number, said_text[2]))
            complete += ended
    total, final = said + len(texts), said + complete
    chunks: list[Chunk] = []
    open_ = 0
    # Window starts are multiples of the stride; the rule depends only on the total count.
    for start in range(said, max(1, total - WINDOW_MESSAGES + WINDOW_STRIDE), WINDOW_STRIDE):
        window = texts[start - said:start - said + WINDOW_MESSAGES]
        if not window:
            break
        stamp = window[0][1]
        when = stamp_line(stamp, window[-1][1])
        body = "\n".join(t[0] for t in window)
        # The owner's words only: a private chat of the owner's, and no guest line in the window.
        mine = owner and not shared and not any(t[4] for t in window)
        chunks.append(Chunk(
            "session", path, f"{when}\n{body}" if when else body,
            start_line=window[0][3], end_line=window[-1][3], session_key=head.key,
            date=stamp[:10] if len(stamp) >= 10 else None, channel=head.channel,
            chat_type=head.chat_type, owner=mine,
            origin=origin_of(head.key, head.channel, mine, imported=head.imported)))
        open_ += start + WINDOW_MESSAGES > final
    # The first window that can still change: the first stride multiple not yet full.
    first_open = max(said, final - WINDOW_MESSAGES + 1)
    first_open += -first_open % WINDOW_STRIDE
    if first_open < total:
        at, at_line = texts[first_open - said][2], texts[first_open - said][3]
    else:
        at = _complete_end(data, offset)
        at_line = line + data[:at - offset].count(b"\n")
    return chunks, Resume(at, first_open, open_, at_line)


def _said_text(raw: bytes, *, shared: bool = False) -> tuple[str, str, bool] | None:
    """("role: text", timestamp, written by a guest) of a user/assistant line worth finding,
    else None. In a shared chat a user line names its speaker instead (``[guest …]: text``)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("_type") == "metadata":
        return None
    role, content = data.get("role"), data.get("content")
    if role not in ("user", "assistant") or data.get("status") in ("error", "cancelled"):
        return None
    if not isinstance(content, str) or not content.strip():
        return None
    text = content.strip()
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "…"
    stamp = data.get("timestamp")
    guest = role == "user" and data.get("sender_role") == "guest"
    who = label_of(data.get("sender_role"), data.get("sender_id"), data.get("sender_name")) \
        if shared and role == "user" else role
    return f"{who}: {text}", stamp if isinstance(stamp, str) else "", guest


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
