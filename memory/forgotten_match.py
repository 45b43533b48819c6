"""Finding forgotten texts: the matcher that tombstones (``memory.tombstones``) are tested with.

A tombstone holds no text by default, only a salted digest of the *normalised* text
(casefolded, every whitespace run one space), its length and a 20-bit rolling hash. So a
matcher cannot search for the text; it slides over every window of the right length,
compares the cheap rolling hash, and hashes only the few candidates — across case and line
wraps. Writers drop lines holding a match, readers redact them to ``[forgotten]``
(``redact_message`` for a transcript message).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

__all__ = ["REDACTED", "Matcher", "Tombstone", "normalise", "redact_message"]

REDACTED = "[forgotten]"
_MOD = 1 << 64
_ROLL_BITS = 0xFFFFF


def _window_hashes(norm: str, base: int) -> Any:
    """``windows(length, rolls)``: the end index of every window of ``norm`` whose rolling
    hash (``Matcher.roll``) is in ``rolls`` — computed for all windows at once with numpy
    (prefix sums in uint64, which wrap modulo 2**64 as the hash does)."""
    import numpy as np  # only once something is forgotten: a one-shot without tombstones skips it

    codes = np.frombuffer(norm.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    n = len(codes)
    inverse = pow(base, -1, _MOD)
    with np.errstate(over="ignore"):
        inv_pows = np.concatenate(([np.uint64(1)], np.cumprod(np.full(max(n - 1, 0), inverse, dtype=np.uint64))))
        pows = np.concatenate(([np.uint64(1)], np.cumprod(np.full(max(n - 1, 0), base, dtype=np.uint64))))
        prefix = np.concatenate(([np.uint64(0)], np.cumsum(codes * inv_pows[:n], dtype=np.uint64)))

    def windows(length: int, rolls: Any) -> Any:
        ends = np.arange(length - 1, n)
        with np.errstate(over="ignore"):
            values = (prefix[ends + 1] - prefix[ends + 1 - length]) * pows[ends]
        return ends[np.isin(values & np.uint64(_ROLL_BITS), rolls)]

    return windows


def normalise(text: str) -> str:
    """Casefolded, whitespace runs (line wraps included) collapsed to one space, stripped."""
    return " ".join(text.casefold().split())


@functools.cache
def _spaces() -> Any:
    import numpy as np

    return np.array([c for c in range(0x3100) if chr(c).isspace()], dtype=np.uint32)


def _normalised_with_map(text: str) -> tuple[str, Any]:
    """``normalise`` without the strip, plus each output character's index in ``text``."""
    folded = text.casefold()
    if len(folded) != len(text):  # a character folds to several (ß -> ss): go one by one
        return _normalised_slowly(text)
    import numpy as np

    codes = np.frombuffer(folded.encode("utf-32-le"), dtype=np.uint32)
    space = np.isin(codes, _spaces())
    keep = ~(space & np.concatenate(([False], space[:-1])))
    shown = np.where(space, np.uint32(32), codes)[keep]
    return shown.astype("<u4").tobytes().decode("utf-32-le"), np.nonzero(keep)[0]


def _normalised_slowly(text: str) -> tuple[str, list[int]]:
    out: list[str] = []
    where: list[int] = []
    in_space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not in_space:
                out.append(" ")
                where.append(i)
            in_space = True
            continue
        in_space = False
        for folded in ch.casefold():
            out.append(folded)
            where.append(i)
    return "".join(out), where


@dataclass(frozen=True, slots=True)
class Tombstone:
    id: str
    digest: str
    length: int
    roll: int
    created: str
    by: str = ""
    text: str | None = None

    def shown(self) -> str:
        """How a listing names it: the text when kept, else an opaque description."""
        return repr(self.text) if self.text is not None else f"(hashed, {self.length} characters)"


class Matcher:
    """Finds tombstoned texts in any text; an empty matcher matches nothing."""

    def __init__(self, salt: bytes, items: list[Tombstone]) -> None:
        self._salt = salt
        self._base = int.from_bytes(hashlib.sha256(salt + b"roll").digest()[:8], "big") | 1
        self._by_length: dict[int, dict[int, set[str]]] = {}
        for t in items:
            self._by_length.setdefault(t.length, {}).setdefault(t.roll, set()).add(t.digest)

    @classmethod
    def for_text(cls, text: str) -> Matcher:
        """A matcher for ``text`` alone (a fresh salt): what a forget would match, before
        anything is recorded."""
        salt = secrets.token_bytes(16)
        probe = cls(salt, [])
        norm = normalise(text)
        return cls(salt, [Tombstone("", probe.digest(norm), len(norm), probe.roll(norm), "")])

    def __bool__(self) -> bool:
        return bool(self._by_length)

    def digest(self, normalised: str) -> str:
        return hashlib.sha256(self._salt + normalised.encode("utf-8")).hexdigest()

    def roll(self, normalised: str) -> int:
        """The window hash ``spans`` compares first: sum of code points times powers of the
        salted base, modulo 2**64, cut to 20 bits."""
        value = 0
        for ch in normalised:
            value = (value * self._base + ord(ch)) % _MOD
        return value & _ROLL_BITS

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Merged ``(start, end)`` ranges of ``text`` holding a tombstoned text."""
        if not self._by_length or not text or not text.strip():
            return []
        import numpy as np

        norm, where = _normalised_with_map(text)
        windows = _window_hashes(norm, self._base)
        found: list[tuple[int, int]] = []
        for length, rolls in self._by_length.items():
            if length > len(norm):
                continue
            digests = set().union(*rolls.values())
            for end in windows(length, np.fromiter(rolls, dtype=np.uint64)).tolist():
                start = end - length + 1
                if self.digest(norm[start:end + 1]) in digests:  # the roll only narrows it down
                    found.append((int(where[start]), int(where[end]) + 1))
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

    def matches(self, text: str) -> bool:
        return bool(self.spans(text))

    def redact(self, text: str) -> str:
        """``text`` with every tombstoned span replaced by ``[forgotten]``."""
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        last = 0
        for start, end in spans:
            parts.append(text[last:start])
            parts.append(REDACTED)
            last = end
        parts.append(text[last:])
        return "".join(parts)

    def drop_lines(self, text: str) -> tuple[str, list[str]]:
        """``text`` without the lines holding a tombstoned text (a match across a line wrap
        takes every line it touches); returns the text and the lines that went."""
        spans = self.spans(text)
        if not spans:
            return text, []
        lines = text.splitlines(keepends=True)
        starts: list[int] = []
        pos = 0
        for line in lines:
            starts.append(pos)
            pos += len(line)
        kept: list[str] = []
        dropped: list[str] = []
        for line, start in zip(lines, starts, strict=True):
            end = start + len(line.rstrip("\r\n"))
            if any(s < max(end, start + 1) and e > start for s, e in spans):
                dropped.append(line.rstrip("\r\n"))
            else:
                kept.append(line)
        return "".join(kept), dropped


def redact_message(message: dict[str, Any], matcher: Matcher) -> dict[str, Any]:
    """A transcript message with forgotten texts redacted in what a model or a person would
    read (its text, its content parts, its tool-call arguments); the same object when
    nothing matched."""
    if not matcher:
        return message
    changed: dict[str, Any] = {}
    content = message.get("content")
    if isinstance(content, str):
        redacted = matcher.redact(content)
        if redacted != content:
            changed["content"] = redacted
    elif isinstance(content, list):
        parts = [{**part, "text": matcher.redact(part["text"])}
                 if isinstance(part, dict) and isinstance(part.get("text"), str) else part
                 for part in content]
        if parts != content:
            changed["content"] = parts
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        fixed = []
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if isinstance(fn, dict) and isinstance(args, str) and matcher.matches(args):
                call = {**call, "function": {**fn, "arguments": matcher.redact(args)}}
            fixed.append(call)
        if fixed != calls:
            changed["tool_calls"] = fixed
    return {**message, **changed} if changed else message
