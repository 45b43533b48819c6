"""``forget``: the owner's way to make the assistant drop something it learned.

Removes every line mentioning ``text`` (case-insensitive) from ``memory/MEMORY.md`` and
``USER.md`` and commits ``forget: <text>``, so even forgetting can be undone with
``/dream-restore``. Markdown headings are kept: forgetting "user" must not tear the
structure out of ``USER.md``.
"""

from __future__ import annotations

import logging

from memory.gitstore import GitStore
from memory.store import MemoryStore

logger = logging.getLogger(__name__)

__all__ = ["forget"]


async def forget(store: MemoryStore, git: GitStore, text: str) -> list[str]:
    """Remove the lines containing ``text``; return them (empty when nothing matched)."""
    needle = text.strip().casefold()
    if not needle:
        raise ValueError("say what to forget: an empty text would match every line")
    # Unsaved hand edits get their own commit, so the forget commit holds only the removal.
    await git.acommit_manual_edits()
    removed: list[str] = []
    for which in ("memory", "user"):
        current = await store.read_text(which)
        kept: list[str] = []
        for line in current.splitlines(keepends=True):
            if needle in line.casefold() and not line.lstrip().startswith("#"):
                removed.append(line.rstrip("\r\n"))
            else:
                kept.append(line)
        if len(kept) != len(current.splitlines(keepends=True)):
            await store.write_text(which, "".join(kept))
    if removed:
        await git.acommit(f"forget: {' '.join(text.split())[:60]}")
        logger.info("forgot %d line(s)", len(removed))
    return removed
