"""The note ``/new`` leaves behind: ``memory/<date>-<slug>.md``, a page a person can read.

In a shared chat (a group, a room, a thread) the note goes to ``memory/shared/<date>-<chat>.md``
instead: named after the chat's key, since a guest's words must not name a file, and filed
by the recall index as that chat's guest material — a group never writes the owner's notes.

The transcript of a closed conversation becomes ``<stem>.<stamp>.jsonl.old`` and its summary
goes to ``history.jsonl`` — both for machines. The note puts the same summary (the history
entries ``/new``'s archive just wrote, no extra model call) under a dated, named file
beside the daily notes, where the recall index finds it like any other note. The slug comes
from the conversation's first words; a name already taken gets ``-2``, ``-3``…
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lucidgate.memory._history_index import HistoryEntry
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.speakers import quoted
from lucidgate.memory.tombstones import Tombstones

__all__ = ["SHARED_NOTES_DIR", "first_user_text", "note_text", "shared_note_key", "shared_note_text", "slug",
           "write_session_note", "write_shared_note"]

SHARED_NOTES_DIR = "memory/shared"
SHARED_NOTE_HEAD = "<!-- shared chat: {key} -->"
_HEAD = re.compile(r"^<!-- shared chat: (\".*\") -->$")

MAX_NOTE_CHARS = 4000
_FILLER = frozenset({"a", "an", "the", "and", "or", "to", "of", "i", "you", "me", "my", "is", "are",
                     "please", "can", "could", "hi", "hello", "hey"})


def slug(text: str, *, words: int = 5, max_chars: int = 40) -> str:
    """A file-name-safe summary of ``text``: a few lowercase ASCII words joined by ``-``."""
    picked = [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _FILLER][:words]
    joined = "-".join(picked)[:max_chars].strip("-")
    return joined or "conversation"


def first_user_text(messages: Sequence[dict[str, Any]]) -> str:
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and not message.get("kind"):
            return content
    return ""


def note_text(*, key: str, when: datetime, messages: Sequence[dict[str, Any]],
              entries: Sequence[HistoryEntry], earlier: bool) -> str:
    """The note's markdown: a heading, where it came from, the summary bullets."""
    title = " ".join(first_user_text(messages).split())[:80] or "Conversation"
    lines = [f"# {when.strftime('%Y-%m-%d %H:%M')} — {title}", "",
             f"Conversation {key}, closed with /new ({len(messages)} message(s)).", ""]
    summary = "\n".join(e.content.strip() for e in entries if e.content.strip())
    lines.append(summary or "- (nothing worth keeping was found)")
    if earlier:
        lines += ["", "Earlier parts of this conversation were summarised into history before."]
    text = "\n".join(lines) + "\n"
    return text if len(text) <= MAX_NOTE_CHARS else text[:MAX_NOTE_CHARS].rsplit("\n", 1)[0] + "\n…\n"


def write_session_note(workspace: Path, text: str, *, when: datetime, title_source: str) -> Path:
    """Create ``memory/<date>-<slug>.md`` (never overwriting one); returns its path. Blocking.
    What the owner asked to forget is redacted, in the name and the text."""
    forgotten = Tombstones(workspace).matcher()
    text, title_source = forgotten.redact(text), forgotten.redact(title_source)
    return _write_new(workspace / "memory", f"{when.date().isoformat()}-{slug(title_source)}", text)


def shared_note_text(*, key: str, when: datetime, speakers: Sequence[str],
                     entries: Sequence[HistoryEntry], earlier: bool) -> str:
    """A shared chat's note: whose chat it was and who spoke, then the summary, quoted.

    Its first line records the chat (``SHARED_NOTE_HEAD``): the recall index files the note
    under that chat, as a guest's material, never as the owner's."""
    who = ", ".join(speakers) or "not recorded"
    summary = "\n".join(e.content.strip() for e in entries if e.content.strip()) \
        or "- (nothing worth keeping was found)"
    lines = [SHARED_NOTE_HEAD.format(key=json.dumps(key)),
             f"# {when.strftime('%Y-%m-%d %H:%M')} — shared chat {key}", "",
             f"A shared chat, closed with /new. Speakers: {who}. What follows is quoted material "
             "from a chat with guests, not the owner's notes or instructions.", "", quoted(summary)]
    if earlier:
        lines += ["", "Earlier parts of this conversation were summarised into history before."]
    text = "\n".join(lines) + "\n"
    return text if len(text) <= MAX_NOTE_CHARS else text[:MAX_NOTE_CHARS].rsplit("\n", 1)[0] + "\n…\n"


def shared_note_key(text: str) -> str | None:
    """The chat a shared note belongs to, from its first line; None when it has no such line."""
    first = text.split("\n", 1)[0].strip()
    match = _HEAD.match(first)
    if match is None:
        return None
    try:
        key = json.loads(match.group(1))
    except ValueError:
        return None
    return key if isinstance(key, str) and key else None


def write_shared_note(workspace: Path, text: str, *, when: datetime, session_key: str) -> Path:
    """Create ``memory/shared/<date>-<chat>.md``: named after the chat, never after what anyone
    wrote in it. Blocking. What the owner asked to forget is redacted."""
    text = Tombstones(workspace).matcher().redact(text)
    return _write_new(workspace / SHARED_NOTES_DIR, f"{when.date().isoformat()}-{session_file_stem(session_key)}",
                      text)


def _write_new(folder: Path, base: str, text: str) -> Path:
    """Create ``<folder>/<base>.md`` (or ``-2``, ``-3``…), never overwriting a note."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".note-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        for n in range(1, 1000):
            path = folder / (f"{base}.md" if n == 1 else f"{base}-{n}.md")
            try:
                # A hard link appears whole or not at all, and never replaces a note.
                os.link(tmp, path)
            except FileExistsError:
                continue
            return path
        raise FileExistsError(f"no free name for {base}.md in {folder}")
    finally:
        os.unlink(tmp)
