"""Tombstones: what the owner asked the assistant to forget, kept so it stays forgotten.

    state/forgotten.json   {"salt": hex, "items": [{"id", "digest", "length", "roll",
                            "created", "by", "text"?}, ...]}

A tombstone is hashed by default: ``digest`` is a salted SHA-256 of the *normalised* text
(casefolded, every whitespace run — line wraps included — one space), ``length`` its length
in characters and ``roll`` a 20-bit rolling hash that lets a matcher test every window of a
text cheaply and hash only the few candidates. The text itself is kept only when the owner
asks (``keep_text``), so the file answers "was this forgotten?" without saying what.

``Matcher`` (``memory.forgotten_match``) finds the spans of a text that match any tombstone;
memory writers drop lines holding one, readers redact them to ``[forgotten]``. The matcher
is cached until the file changes (a stat per use), so calling ``matcher()`` often is cheap.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write_text
from lucidgate.memory.forgotten_match import REDACTED, Matcher, Tombstone, normalise, redact_message

logger = logging.getLogger(__name__)

__all__ = ["REDACTED", "TOMBSTONES_FILE", "Matcher", "Tombstone", "Tombstones", "normalise",
           "redact_message"]

TOMBSTONES_FILE = "state/forgotten.json"
LEGACY_FILE = "memory/.forgotten.json"  # plain needles an older forget kept for the index


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
