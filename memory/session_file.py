"""One session's transcript as a file: its line format, the ``Session`` it loads into, and
the loader that survives a crash mid-write (DESIGN §4.1).

Line 1 is metadata; every later line is one message. ``last_consolidated`` lives in a
sidecar (``memory.session_sidecar``), which wins over an older file's line 1. A corrupt
line is skipped with a warning and a torn last line is ended, so a crash at any point
leaves a file the next start can read. ``memory.sessions`` caches and appends to these.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from lucidgate.memory.archived import ARCHIVED
from lucidgate.memory.session_sidecar import read_state, state_path
from lucidgate.memory.tombstones import Matcher, redact_message

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "REMINDER_KIND", "PendingKind", "Session", "dumps_line", "load_session_file",
           "now_iso", "terminate_torn_tail"]

FORMAT_VERSION = 1
REMINDER_KIND = "reminder"  # a line recording a reminder the user was sent, written between turns
PendingKind = Literal["pending_user_turn", "runtime_checkpoint"]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(slots=True)
class Session:
    key: str
    path: Path
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    metadata: dict[str, Any] = field(default_factory=dict)
    last_consolidated: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    # How many leading messages are ``ARCHIVED`` markers (at most ``last_consolidated``).
    released: int = 0

    def active(self) -> list[dict[str, Any]]:
        """Messages the prompt may use: everything after the archived prefix."""
        return self.messages[self.last_consolidated :]

    def release_archived(self) -> None:
        """Drop the archived prefix's dicts from memory, keeping its positions (``ARCHIVED``).
        Costs what was archived since the last call, not the session's length."""
        end = min(self.last_consolidated, len(self.messages))
        if end > self.released:
            self.messages[self.released:end] = [ARCHIVED] * (end - self.released)
            self.released = end

    def header(self) -> dict[str, Any]:
        return {
            "_type": "metadata",
            "v": FORMAT_VERSION,
            "key": self.key,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": self.metadata,
            "last_consolidated_in": state_path(self.path).name,
        }

    def pending_state(self) -> PendingKind | None:
        """What the tail of the log says about an unfinished turn.

        ``pending_user_turn``: the last turn-relevant message is a user message with no
        reply after it. ``runtime_checkpoint``: the turn got as far as an assistant
        ``tool_calls`` message (and maybe some results) but never finished. A reminder line
        is not a reply: a shutdown can write one after a turn it cut off.
        """
        for msg in reversed(self.messages):
            if msg.get("kind") == REMINDER_KIND:
                continue
            role = msg.get("role")
            if role == "user":
                return "pending_user_turn"
            if role == "tool":
                return "runtime_checkpoint"
            if role == "assistant":
                return "runtime_checkpoint" if msg.get("tool_calls") else None
            # other markers (none yet) are ignored
        return None


def dumps_line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))



def terminate_torn_tail(path: Path) -> None:
    """A crash mid-append leaves a last line without its newline; end it, so the next
    append starts a line of its own (the fragment is skipped as corrupt on load)."""
    with path.open("rb+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) != b"\n":
            logger.warning("%s ended mid-line (a crash during a write); the fragment is skipped", path.name)
            fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())


def load_session_file(path: Path, key: str | None = None, *, redact: Matcher | None = None,
                      release_archived: bool = False) -> Session:
    """Parse a transcript; a corrupt line is skipped with a warning, never a crash.
    ``redact``: forgotten texts to redact in the loaded messages (the file is not changed).
    ``release_archived``: hold the archived prefix as ``ARCHIVED`` markers (the store's working
    copy); by default every message is loaded (a reader of the whole record)."""
    sidecar = read_state(path)
    keep_from = sidecar if release_archived and sidecar is not None else 0
    session = Session(key=key or path.stem, path=path)
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
            except ValueError:
                logger.warning("%s line %d is corrupt; skipped", path.name, lineno)
                continue
            if obj.get("_type") == "metadata":
                session.key = obj.get("key", session.key)
                session.created_at = obj.get("created_at", session.created_at)
                session.updated_at = obj.get("updated_at", session.updated_at)
                session.metadata = obj.get("metadata") or {}
                session.last_consolidated = int(obj.get("last_consolidated", 0))
            elif "role" in obj:
                if len(session.messages) < keep_from:
                    session.messages.append(ARCHIVED)  # archived: only its position is kept
                else:
                    session.messages.append(redact_message(obj, redact) if redact else obj)
            else:
                logger.warning("%s line %d has no role; skipped", path.name, lineno)
    if sidecar is not None:
        session.last_consolidated = sidecar
    session.last_consolidated = min(session.last_consolidated, len(session.messages))
    if release_archived:
        session.released = min(keep_from, session.last_consolidated)
        session.release_archived()  # a count only line 1 holds (an older file) is released too
    return session
