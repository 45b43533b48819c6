"""``forget``: the owner's way to make the assistant drop something, everywhere it reads, for good.

One forget reaches every place the assistant reads: SOUL.md, USER.md and MEMORY.md, the
daily and session notes, history (live and archive), the working set of every open
conversation, and the recall index (chunks and their cached vectors). Matching is
case-insensitive and across line wraps (``tombstones.normalise``). The text is recorded as
a tombstone (``state/forgotten.json``, hashed unless the owner asks otherwise), so it stays
forgotten: history appends, memory-file writes, notes, Dream and imports drop what matches
one, and transcripts — kept whole as records — are redacted wherever they are shown or fed
to a model. The tracked files change in one commit naming who asked.

A forget that would take a large share of memory (the quarter drop guard), or a text of
fewer than ``MIN_CHARS`` characters, is refused with ``ForgetNeedsConfirmation`` unless
``confirm`` — "a" must not wipe the files. Git history still holds old versions until a
purge (``memory.purge``); the report says so.

``/forget``, the ``memory_forget`` tool, ``lucid memory forget`` and the console share
``forget_exclusive`` (under Dream's lock) and ``describe``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lucidgate.memory.errors import GitStoreError
from lucidgate.memory._forget_places import (
    LONG_TERM,
    FilePlan,
    HistoryPlan,
    apply_file,
    apply_history,
    count_lines,
    note_paths,
    plan_file,
    plan_history,
)
from lucidgate.memory._forget_mentions import mentions
from lucidgate.memory._history_archive import archive_files
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.store import MemoryStore
from lucidgate.memory.tombstones import Matcher, Tombstone, normalise

if TYPE_CHECKING:
    from lucidgate.memory.search.index import MemoryIndex
    from lucidgate.memory.sessions import SessionStore

logger = logging.getLogger(__name__)

__all__ = ["ForgetNeedsConfirmation", "ForgetReport", "MIN_CHARS", "describe", "forget",
           "forget_exclusive", "mentions"]

MIN_CHARS = 4


class ForgetNeedsConfirmation(ValueError):
    """The forget would match too much (or the text is too short) to run unconfirmed."""


@dataclass(slots=True)
class ForgetReport:
    text: str
    by: str
    tombstone: str = ""
    files: dict[str, int] = field(default_factory=dict)  # file -> lines removed
    history_lines: int = 0
    history_entries: int = 0
    sessions: int = 0  # transcripts holding it, now redacted where shown or sent
    index_chunks: int = 0
    removed: list[str] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)
    commit: str | None = None
    purged: str = ""  # what a purge of the git history reported

    @property
    def found(self) -> bool:
        return bool(self.removed or self.sessions or self.index_chunks)


@dataclass(slots=True)
class _Plan:
    files: list[FilePlan]
    history: list[HistoryPlan]

    def removed(self) -> int:
        return sum(len(p.removed) for p in self.files) + sum(len(p.removed) for p in self.history)

    def total(self) -> int:
        return sum(p.total for p in self.files) + sum(p.total for p in self.history)


def _plan(store: MemoryStore, matcher: Matcher) -> _Plan:
    ws = store.workspace
    rels = [*LONG_TERM, *(p.relative_to(ws).as_posix() for p in note_paths(ws))]
    files = [p for p in (plan_file(ws, rel, matcher) for rel in rels) if p]
    paths = [store.history_path, *archive_files(store.archive_dir)]
    return _Plan(files, [p for p in (plan_history(path, matcher) for path in paths) if p])


def _memory_size(store: MemoryStore) -> int:
    """Non-empty lines of the long-term files and notes plus history lines: the whole the
    drop guard compares a forget with."""
    ws = store.workspace
    total = 0
    for path in [*(ws / rel for rel in LONG_TERM), *note_paths(ws)]:
        try:
            total += count_lines(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return total + sum(len(p.read_bytes().splitlines()) for p in
                       [store.history_path, *archive_files(store.archive_dir)] if p.exists())


def _check(text: str, plan: _Plan, size: int) -> None:
    norm = normalise(text)
    if len(norm) < MIN_CHARS:
        raise ForgetNeedsConfirmation(
            f"{text.strip()!r} is shorter than {MIN_CHARS} characters and would match inside many "
            "words; say more of what to forget, or confirm")
    removed = plan.removed()
    if removed > max(2, max(size, plan.total()) / 4):
        raise ForgetNeedsConfirmation(
            f"forgetting {text.strip()!r} would remove {removed} of memory's {size} lines "
            "(more than a quarter); narrow the text, or confirm")


async def forget(store: MemoryStore, git: GitStore, text: str, *, index: MemoryIndex | None = None,
                 sessions: SessionStore | None = None, by: str = "", confirm: bool = False,
                 keep_text: bool = False) -> ForgetReport:
    """Forget ``text`` everywhere (see the module docstring); returns what went where.
    ``by`` names who asked in the commit message and the log line (the audit trail)."""
    if not normalise(text):
        raise ValueError("say what to forget: an empty text would match every line")
    probe = Matcher.for_text(text)
    # Unsaved hand edits get their own commit, so the forget commit holds only the removal.
    await _versioned(git.acommit_manual_edits())
    tombstones = store.tombstones

    def run() -> tuple[_Plan, Tombstone]:
        plan = _plan(store, probe)
        if not confirm:
            _check(text, plan, _memory_size(store))
        stone = tombstones.add(text, by=by, keep_text=keep_text)
        for fp in plan.files:
            apply_file(store.workspace, fp)
        for hp in plan.history:
            apply_history(hp)
        return plan, stone

    plan, stone = await store.with_history_locked(run)
    report = ForgetReport(text=" ".join(text.split()), by=by, tombstone=stone.id)
    for fp in plan.files:
        report.files[fp.rel] = len(fp.removed)
        report.removed.extend(fp.removed)
    for hp in plan.history:
        report.history_lines += len(hp.removed)
        report.history_entries += hp.entries
        report.removed.extend(hp.removed)
    if plan.files:
        report.commit = await _versioned(git.acommit(f"forget: [{stone.id}]" + (f" (asked by {by})" if by else "")))
    if sessions is not None:
        report.sessions = await sessions.redact(tombstones.matcher(), probe)
    if index is not None:
        report.index_chunks = await asyncio.to_thread(index.purge_forgotten, probe)
        await asyncio.to_thread(index.sync_files)
    else:
        report.not_reached.append("the recall index (not open here; it drops the text at its next sync)")
    if not report.purged:
        report.not_reached.append("the history of changes (git) still holds earlier versions of the "
                                  "memory files; `lucid memory forget --purge <text>` rewrites it")
    report.not_reached.append("transcripts keep the original words as records; they are redacted "
                              "wherever shown or sent to the model")
    logger.info("forget [%s]%s: %d line(s) removed, %d session(s) redacted, %d index chunk(s) dropped",
                stone.id, f" (asked by {by})" if by else "", len(report.removed), report.sessions,
                report.index_chunks)
    return report


async def _versioned(commit: Awaitable[str | None]) -> str | None:
    """A failing commit must not stop a forget: the lines go either way (logged; doctor shows
    it). The commit's sha, or None when there was nothing to commit or it failed."""
    try:
        return await commit
    except GitStoreError as exc:
        logger.error("forget: the memory commit failed (%s); forgetting anyway", exc)
        return None


class Exclusive(Protocol):
    """Dream's lock: ``exclusive()`` is an async context manager raising ``DreamBusy``."""

    def exclusive(self) -> Any: ...


async def forget_exclusive(dream: Exclusive, store: MemoryStore, git: GitStore, text: str, *,
                           purge: bool = False, backup_dirs: list[Path] | None = None,
                           **kwargs: Any) -> ForgetReport:
    """``forget`` under Dream's lock; raises ``DreamBusy`` while a Dream runs. ``purge`` also
    rewrites the git history so no commit holds the text (``memory.purge``), then re-indexes."""
    async with dream.exclusive():
        report = await forget(store, git, text, **kwargs)
        if purge:
            from lucidgate.memory.purge import purge_history

            purged = await asyncio.to_thread(purge_history, git, text, backup_dirs=backup_dirs)
            report.purged = purged.describe()
            report.not_reached = [n for n in report.not_reached if "history of changes" not in n]
            index = kwargs.get("index")
            if index is not None:
                await asyncio.to_thread(index.sync_files)
            logger.info("forget [%s]: git history purged%s", report.tombstone,
                        f" (asked by {report.by})" if report.by else "")
        return report


def describe(report: ForgetReport) -> str:
    """The answer to a forget, the same for every surface: what went, from where, and what
    a forget does not reach."""
    if not report.found:
        head = f"Nothing in memory mentions {report.text!r}; it is recorded as forgotten anyway."
    else:
        # The removed lines are usually bullets already; show each as one bullet, never "- - …".
        head = "Forgot:\n" + "\n".join(f"- {line.strip().removeprefix('- ').removeprefix('* ')}"
                                       for line in report.removed[:30])
        if len(report.removed) > 30:
            head += f"\n- … and {len(report.removed) - 30} more line(s)"
    places = [f"- {rel}: {n} line(s)" for rel, n in report.files.items()]
    if report.history_lines:
        places.append(f"- history: {report.history_lines} line(s) in {report.history_entries} entr(y/ies)")
    if report.sessions:
        places.append(f"- conversations: {report.sessions} session(s) now show [forgotten] instead")
    if report.index_chunks:
        places.append(f"- recall index: {report.index_chunks} chunk(s)")
    body = head
    if places:
        body += "\n\nRemoved from:\n" + "\n".join(places)
    if report.purged:
        body += "\n\n" + report.purged
    body += (f"\n\nIt stays forgotten (tombstone {report.tombstone}; `lucid memory forgotten` lists it)."
             "\nNot reached:\n" + "\n".join(f"- {line}" for line in report.not_reached))
    return body
