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

``/forget`` and the model's ``memory_forget`` tool share ``forget_exclusive`` (Dream's lock,
so a running Dream never edits under it) and ``describe``; ``mentions`` lists what memory
holds about a text without changing anything (the ``memory_list`` tool).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol

from lucidgate.config.fileio import atomic_write_text
from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.search.index import FORGOTTEN_FILE, MemoryIndex
from lucidgate.memory.store import MemoryStore

logger = logging.getLogger(__name__)

__all__ = ["describe", "forget", "forget_exclusive", "mentions"]


async def forget(store: MemoryStore, git: GitStore, text: str, *,
                 index: MemoryIndex | None = None, by: str = "") -> list[str]:
    """Remove the lines containing ``text``; return them (empty when nothing matched).
    ``by`` names who asked in the commit message and the log line (the audit trail)."""
    needle = text.strip().casefold()
    if not needle:
        raise ValueError("say what to forget: an empty text would match every line")
    # Unsaved hand edits get their own commit, so the forget commit holds only the removal.
    await _versioned(git.acommit_manual_edits())
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
        await _versioned(git.acommit(f"forget: {' '.join(text.split())[:60]}" + (f" ({by})" if by else "")))
    removed.extend(await store.forget_history(needle))
    await asyncio.to_thread(_remember_forgotten, store, needle)
    if index is not None:
        await asyncio.to_thread(index.sync_files)
    logger.info("forget%s: %d line(s) removed", f" ({by})" if by else "", len(removed))
    return removed


async def _versioned(commit: Awaitable[str | None]) -> None:
    """A failing commit must not stop a forget: the lines go either way (logged; doctor shows it)."""
    try:
        await commit
    except GitStoreError as exc:
        logger.error("forget: the memory commit failed (%s); forgetting anyway", exc)


class Exclusive(Protocol):
    """Dream's lock: ``exclusive()`` is an async context manager raising ``DreamBusy``."""

    def exclusive(self) -> Any: ...


async def forget_exclusive(dream: Exclusive, store: MemoryStore, git: GitStore, text: str, *,
                           index: MemoryIndex | None = None, by: str = "") -> list[str]:
    """``forget`` under Dream's lock; raises ``DreamBusy`` while a Dream runs."""
    async with dream.exclusive():
        return await forget(store, git, text, index=index, by=by)


def describe(removed: list[str], text: str) -> str:
    """The answer to a forget, the same for ``/forget`` and the tool."""
    if not removed:
        return f"Nothing in memory mentions {text.strip()!r}."
    # The removed lines are usually bullets already; show each as one bullet, never "- - …".
    return "Forgot:\n" + "\n".join(f"- {line.strip().removeprefix('- ').removeprefix('* ')}"
                                    for line in removed)


_NOTE = re.compile(r"^\d{4}-\d\d-\d\d(?:-.+)?\.md$")  # daily notes and /new's session notes


def mentions(workspace: Path, text: str, limit: int = 60) -> list[str]:
    """Lines of MEMORY.md, USER.md, the daily notes and history (live and archived) that
    contain ``text`` (case-insensitive, as ``forget`` matches), as ``where: line``; at most
    ``limit``. Reads files; call it in a worker thread."""
    needle = text.strip().casefold()
    if not needle:
        raise ValueError("say what to look for")
    memory = workspace / "memory"
    files = [memory / "MEMORY.md", workspace / "USER.md"]
    files += sorted((p for p in memory.glob("*.md") if _NOTE.match(p.name)), reverse=True)
    found: list[str] = []
    for path in files:
        for number, line in enumerate(_lines(path), 1):
            if needle in line.casefold() and line.strip():
                found.append(f"{path.relative_to(workspace).as_posix()}:{number}: {line.strip()}")
    for path in [memory / "history.jsonl", *sorted((memory / "archive").glob("history-*.jsonl"))]:
        for raw in _lines(path):
            try:
                entry = json.loads(raw)
                content, cursor = str(entry["content"]), entry.get("cursor")
            except (ValueError, KeyError, TypeError):
                continue
            found += [f"history #{cursor} {entry.get('timestamp', '')}: {line.strip()}"
                      for line in content.splitlines() if needle in line.casefold()]
    return found[:limit] + ([f"[{len(found) - limit} more; narrow the text]"] if len(found) > limit else [])


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


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
