"""Tombstones: what the owner asked the assistant to forget, kept so it stays forgotten.

    state/forgotten.json   {"salt": hex, "items": [{"id", "digest", "length", "roll",
                            "created", "by", "text"?}, ...]}

A tombstone is hashed by default: ``digest`` is a salted SHA-256 of the *normalised* text
(casefolded, every whitespace run — line wraps included — one space), ``length`` its length
in characters and ``roll`` a 20-bit rolling hash that lets a matcher test every window of a
text cheaply and hash only the few candidates. The text itself is kept only when the owner
asks (``keep_text``), so the file answers "was this forgotten?" without saying what.

``Matcher`` finds the spans of a text that match any tombstone, across case and line wraps;
memory writers drop lines holding one, readers redact them to ``[forgotten]``. The matcher
is cached until the file changes (a stat per use), so calling ``matcher()`` often is cheap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import secrets
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["REDACTED", "TOMBSTONES_FILE", "Matcher", "Tombstone", "Tombstones", "normalise",
           "redact_message"]

TOMBSTONES_FILE = "state/forgotten.json"
LEGACY_FILE = "memory/.forgotten.json"  # plain needles an older forget kept for the index
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


class Tombstones:
    """The workspace's tombstone file; thread-safe, re-read when it changes on disk."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.path = self.workspace / TOMBSTONES_FILE
        self._lock = threading.RLock()
        self._key: tuple[int, int, int] | None = None
        self._salt = b""
        self._items: list[Tombstone] = []
        self._matcher = Matcher(b"", [])

    # ------------------------------------------------------------------ reading
    def _stat_key(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> None:
        key = self._stat_key()
        if key is not None and key == self._key:
            return
        data: Any = {}
        if key is not None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                logger.warning("%s is unreadable (%s); no tombstones apply until it is fixed",
                               self.path, exc)
                data = {}
        salt_hex = data.get("salt") if isinstance(data, dict) else None
        self._salt = bytes.fromhex(salt_hex) if isinstance(salt_hex, str) else b""
        raw = data.get("items") if isinstance(data, dict) else None
        self._items = [t for t in (_parse(x) for x in (raw if isinstance(raw, list) else [])) if t]
        self._matcher = Matcher(self._salt, self._items)
        self._key = key

    def items(self) -> list[Tombstone]:
        with self._lock:
            self._migrate_legacy()
            self._load()
            return list(self._items)

    def matcher(self) -> Matcher:
        with self._lock:
            self._migrate_legacy()
            self._load()
            return self._matcher

    def version(self) -> tuple[int, int, int] | None:
        """Changes whenever the file does (a stat): whether a cached redaction is stale."""
        with self._lock:
            self._load()
            return self._key

    def signature(self) -> str:
        """Changes whenever the set of tombstones does (the recall index re-chunks then)."""
        return ",".join(sorted(t.digest for t in self.items()))

    # ------------------------------------------------------------------ writing
    def add(self, text: str, *, by: str = "", keep_text: bool = False) -> Tombstone:
        """Record ``text`` as forgotten (idempotent: the same normalised text is one entry)."""
        norm = normalise(text)
        if not norm:
            raise ValueError("an empty text cannot be forgotten")
        with self._lock:
            self._migrate_legacy()
            self._load()
            if not self._salt:
                self._salt = secrets.token_bytes(16)
                self._matcher = Matcher(self._salt, self._items)
            matcher = Matcher(self._salt, [])
            digest = matcher.digest(norm)
            for existing in self._items:
                if existing.digest == digest:
                    return existing
            stone = Tombstone(id=digest[:10], digest=digest, length=len(norm), roll=matcher.roll(norm),
                              created=datetime.now(UTC).isoformat(timespec="seconds"), by=by,
                              text=norm if keep_text else None)
            self._save([*self._items, stone])
            return stone

    def remove(self, ident: str) -> Tombstone | None:
        """Un-forget: drop the tombstone whose id starts with ``ident`` (None when none or
        several do)."""
        with self._lock:
            self._load()
            hits = [t for t in self._items if ident and t.id.startswith(ident.strip())]
            if len(hits) != 1:
                return None
            self._save([t for t in self._items if t is not hits[0]])
            return hits[0]

    def adopt(self, raw: bytes) -> int:
        """Take over the tombstones of another workspace's file (a backup's ``forgotten.json``):
        what was forgotten there stays forgotten here. Only well-formed entries are kept, the
        file is rewritten in our own format, and a file that is not a tombstone file at all is
        refused with ``ValueError``. Returns how many tombstones were adopted."""
        try:
            data = json.loads(raw.decode("utf-8"))
            salt = bytes.fromhex(data["salt"])
            items = data["items"]
        except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a tombstone file ({exc})") from None
        if not isinstance(items, list):
            raise ValueError("not a tombstone file (its items are not a list)")
        stones = [t for t in (_parse(x) for x in items) if t]
        with self._lock:
            self._salt = salt
            self._save(stones)
        return len(stones)

    def _save(self, items: list[Tombstone]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"salt": self._salt.hex(),
                "items": [{k: v for k, v in asdict(t).items() if v is not None} for t in items]}
        atomic_write_text(self.path, json.dumps(body, ensure_ascii=False, indent=1) + "\n")
        self._key = None
        self._load()

    def _migrate_legacy(self) -> None:
        """Plain needles an older forget kept become hashed tombstones, then the file goes."""
        legacy = self.workspace / LEGACY_FILE
        if not legacy.exists():
            return
        try:
            needles = json.loads(legacy.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            needles = []
        legacy.unlink(missing_ok=True)  # first: add() below re-enters this method
        for needle in needles if isinstance(needles, list) else []:
            if isinstance(needle, str) and needle.strip():
                self.add(needle, by="an earlier forget")


def _parse(raw: Any) -> Tombstone | None:
    if not isinstance(raw, dict):
        return None
    try:
        return Tombstone(id=str(raw["id"]), digest=str(raw["digest"]), length=int(raw["length"]),
                         roll=int(raw["roll"]), created=str(raw.get("created", "")),
                         by=str(raw.get("by", "")),
                         text=raw["text"] if isinstance(raw.get("text"), str) else None)
    except (KeyError, TypeError, ValueError):
        return None


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
