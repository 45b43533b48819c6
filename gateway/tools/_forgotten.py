"""What the owner asked to forget, as the file tools see it: redacted in what they read
back to the model, dropped from what they write into memory files (so a memory flush or a
turn cannot write a forgotten fact back). Blocking; the tools call it in worker threads."""

from __future__ import annotations

import logging
from pathlib import Path

from lucidgate.memory.search.sources import source_of
from lucidgate.memory.tombstones import Tombstones

logger = logging.getLogger(__name__)

__all__ = ["redact", "without_forgotten"]


def redact(workspace: Path, text: str) -> str:
    return Tombstones(workspace).matcher().redact(text)


def without_forgotten(workspace: Path, path: Path, text: str) -> str:
    """``text`` without the lines holding a forgotten text when ``path`` is a memory file
    (SOUL/USER/MEMORY.md, a note under memory/); other files are written as given."""
    try:
        rel = path.resolve().relative_to(workspace.resolve()).as_posix()
    except ValueError:
        return text
    if source_of(rel) not in ("memory", "notes"):
        return text
    kept, dropped = Tombstones(workspace).matcher().drop_lines(text)
    if dropped:
        logger.info("%s: %d line(s) matching a forgotten text not written", rel, len(dropped))
    return kept
