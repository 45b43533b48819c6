"""``forget``: the owner's way to make the assistant drop something it learned.

Removes every line mentioning ``text`` (case-insensitive) from ``memory/MEMORY.md`` and
``USER.md`` and commits ``forget: <text>``, so even forgetting can be undone with
``/dream-restore``. Markdown headings are kept: forgetting "user" must not tear the
structure out of ``USER.md``.

History is the other place a fact lives: the matching lines go from ``history.jsonl`` and
its archive too (the only deletion the archive ever sees), and the text is added to
``memory/.forgotten.json`` so the recall index drops transcript windows mentioning it —
transcripts themselves stay append-only. When an index is given it is re-synced before
returning, so a search right after ``/forget`` no longer finds the fact.
"""

from __future__ import annotations

import asyncio
import json
import logging

from config.fileio import atomic_write_text
from memory.gitstore import GitStore
from memory.search.index import FORGOTTEN_FILE, MemoryIndex
from memory.store import MemoryStore

logger = logging.getLogger(__name__)

__all__ = ["forget"]


async def forget(store: MemoryStore, git: GitStore, text: str, *,
                 index: MemoryIndex | None = None) -> list[str]:
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
    removed.extend(await store.forget_history(needle))
    await asyncio.to_thread(_remember_forgotten, store, needle)
    if index is not None:
        await asyncio.to_thread(index.sync_files)
    if removed:
        logger.info("forgot %d line(s)", len(removed))
    return removed


def _remember_forgotten(store: MemoryStore, needle: str) -> None:
    path = store.workspace / FORGOTTEN_FILE
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = []
    needles = [n for n in current if isinstance(n, str)] if isinstance(current, list) else []
    if needle not in needles:
        needles.append(needle)
        atomic_write_text(path, json.dumps(needles, ensure_ascii=False, indent=0) + "\n")
