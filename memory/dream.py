"""Dream: distil new history entries into the long-term memory files (DESIGN §5.3).

Two phases per run, over one batch of up to ``dream.maxBatchSize`` entries after
``.dream_cursor`` — fewer when their prompt would not fit the window (sized with the turn's
token estimate against the prompt budget, halved again if the model still refuses it):

1. *Analysis* — one tool-less call: history + current files + today's date -> tagged
   findings (``dream_prompts``).
2. *Editing* — the gateway's tool loop (handed in as ``ToolLoop``: limits, the
   repeated-call guard and the token cap live there) running ``dream_tools``, which apply
   the findings with surgical edits to exactly the files GitStore versions.

The cursor moves only past entries that were processed: a failed run leaves its batch for
the next one. So that a bad batch is not retried forever, a batch that failed
``MAX_FAILED_RUNS`` runs in a row is skipped, and an entry too long for the window even
alone is skipped at once — both logged with their cursors for ``lucid dream --from``.
History is then compacted, and any change is committed as ``dream: <timestamp>, <n>
change(s)`` so it can be undone (also after a failure, for what was applied).
One Dream runs per workspace at a time: an asyncio lock here plus ``memory/.dream.lock``
for other processes; a second caller gets ``DreamBusy`` at once instead of queueing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from lucidgate.config.schema import AgentDefaults
from lucidgate.memory.dream_prompts import Finding, parse_findings, phase1_messages, phase2_messages
from lucidgate.memory.dream_tools import MAX_READ_CHARS, TOOL_SCHEMAS, DreamTools, list_skills
from lucidgate.memory import tokens
from lucidgate.memory.errors import DreamBusy, GitStoreError, PromptTooLong
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.protocols import ChatModel, ChatResult, LoopStats, ToolCall, ToolLoop
from lucidgate.memory.store import HistoryEntry, MemoryStore, Which

logger = logging.getLogger(__name__)

__all__ = ["Dream", "DreamReport"]

MAX_FAILED_RUNS = 3  # a batch failing this often in a row is skipped, not retried forever
FILES: dict[str, Which] = {"SOUL.md": "soul", "USER.md": "user", "memory/MEMORY.md": "memory"}


@dataclass(slots=True)
class DreamReport:
    """What one run did; ``summary()`` is the text ``/dream`` and ``lucid dream`` print."""

    first_cursor: int | None = None
    last_cursor: int | None = None
    findings: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    commit: str | None = None
    error: str | None = None
    tokens: int = 0
    stop_reason: str | None = None
    dry_run: bool = False
    skipped: list[int] = field(default_factory=list)  # entries too long for the window
    history_only: list[int] = field(default_factory=list)  # guest/group entries, never shown to the editor

    @property
    def processed(self) -> tuple[int, int] | None:
        if self.first_cursor is None or self.last_cursor is None:
            return None
        return (self.first_cursor, self.last_cursor)

    def summary(self) -> str:
        if self.processed is None:
            return "Dream: nothing new to process."
        head = f"Dream{' (dry run)' if self.dry_run else ''}: entries #{self.first_cursor}–#{self.last_cursor}"
        lines = [f"{head}, {len(self.findings)} finding(s), {len(self.changes)} change(s), "
                 f"{self.tokens} tokens."]
        lines += [f"  {f}" for f in self.findings] if self.dry_run else []
        lines += [f"  - {c}" for c in self.changes]
        if self.commit:
            lines.append(f"Commit {self.commit[:8]} (undo with /dream-restore {self.commit[:8]}).")
        if self.history_only:
            lines.append("Kept as history only (guests or group chats): "
                         + ", ".join(f"#{c}" for c in self.history_only) + ".")
        if self.skipped:
            lines.append("Skipped (too long for the context window): "
                         + ", ".join(f"#{c}" for c in self.skipped) + ".")
        if self.stop_reason and self.stop_reason != "done":
            lines.append(f"Stopped early: {self.stop_reason}.")
        if self.error:
            lines.append(f"Error: {self.error}")
        return "\n".join(lines)


class Dream:
    def __init__(
        self,
        store: MemoryStore,
        git: GitStore,
        model: ChatModel,
        *,
        workspace: Path,
        config: AgentDefaults,
        tool_loop: ToolLoop,
        builtin_skills: Path | None = None,
        on_run: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        # The gateway's built-in skills (handed in: memory never imports the gateway). They
        # are in Dream's skill inventory, and no Dream-made skill may take one's name.
        self.builtin_skills = builtin_skills
        # Told each finished run's outcome: "ok", "nothing" (no new history), "error" or
        # "dry-run" — the gateway counts them as lucid_dream_runs.
        self.on_run = on_run
        self.git = git
        self.model = model
        self.tool_loop = tool_loop
        self.workspace = Path(workspace)
        self.config = config
        self._lock = asyncio.Lock()
        self._failed_runs: dict[int, int] = {}  # first cursor of a failing batch -> runs failed
        # thread_local=False: acquired and released from different worker threads.
        self._file_lock = FileLock(self.workspace / "memory" / ".dream.lock", thread_local=False)
        self.caps = {"SOUL.md": config.memory.max_soul_chars,
                     "USER.md": config.memory.max_user_chars,
                     "memory/MEMORY.md": config.memory.max_memory_chars}

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def trusted(self, entry: HistoryEntry) -> bool:
        """May ``entry`` change SOUL.md, USER.md, MEMORY.md or skills? Only when it came from
        the owner's private chats.

        The consolidator records each entry's provenance (``owner``, ``chat_type``); an entry
        from a guest or from any group chat (the owner's own group messages included: other
        people's words sit in the same chunk) is not trusted. Entries written before provenance
        was recorded carry none and count as the owner's: they predate the field, and the
        window closes with the first Dream after the upgrade.
        """
        if entry.owner is None:
            return True
        return entry.owner and entry.chat_type in (None, "private")

    # ------------------------------------------------------------------ locking
    async def run(self, *, dry_run: bool = False, from_cursor: int | None = None) -> DreamReport:
        """Process one batch; raises ``DreamBusy`` at once if a Dream is already running."""
        async with self.exclusive():
            report = await self._run(dry_run=dry_run, from_cursor=from_cursor)
        if self.on_run is not None:
            self.on_run("error" if report.error else "dry-run" if dry_run
                        else "nothing" if report.processed is None else "ok")
        return report

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold the Dream lock (this process and others) for any edit of the memory files,
        e.g. ``/forget``; raises ``DreamBusy`` at once instead of queueing."""
        if self._lock.locked():
            raise DreamBusy()
        async with self._lock:
            if not await asyncio.to_thread(self._try_file_lock):
                raise DreamBusy("a Dream is already running in another lucid process for this "
                                "workspace; try again when it finishes")
            try:
                yield
            finally:
                await asyncio.to_thread(self._file_lock.release)

    def _try_file_lock(self) -> bool:
        (self.workspace / "memory").mkdir(parents=True, exist_ok=True)
        try:
            self._file_lock.acquire(blocking=False)
        except Timeout:
            return False
        return True

    # ------------------------------------------------------------------ the run
    async def _run(self, *, dry_run: bool, from_cursor: int | None) -> DreamReport:
        report = DreamReport(dry_run=dry_run)
        await self.store.refresh()
        since = self.store.dream_cursor() if from_cursor is None else max(0, from_cursor)
        batch = await self.store.read_unprocessed(since=since, limit=self.config.dream.max_batch_size)
        if not batch:
            report.stop_reason = "nothing to do"
            return report  # no LLM call at all
        # Enforced here, not by the prompt: guest and group-chat entries never reach the model
        # that holds the edit tools. They stay in history (and the recall index) as notes.
        owned = [e for e in batch if self.trusted(e)]
        tools = DreamTools(self.workspace, self.caps, builtin=self.builtin_skills)
        covered = False
        try:
            found = await self._analyse(owned, report) if owned else None
            self._cover_held(batch, owned, report)
            covered = True
            if found is None:  # nothing the owner said, or every entry too long for the window
                if not dry_run:
                    await self._finish(report)
                report.stop_reason = report.stop_reason or "done"
                return report
            analysed, findings = found
            tools.trusted = all(self.trusted(e) for e in analysed)
            if dry_run:
                return report
            if any(f.tag != "SKIP" for f in findings):
                # Hand edits go into history first, so the dream commit holds only Dream's.
                await self._commit_hand_edits()
                await self._phase2(findings, tools, report)
            else:
                report.stop_reason = "done"
        except asyncio.CancelledError:
            await self._commit(tools, report)  # whatever was applied stays undoable
            raise
        except Exception as exc:  # noqa: BLE001 - reported; the entries stay for the next run
            report.error = str(exc) or type(exc).__name__
            if not covered and report.last_cursor is not None:
                self._cover_held(batch, owned, report)  # so a skipped batch skips its held entries too
            if not dry_run and self._give_up(report):
                await self._finish(report)
            await self._commit(tools, report)
            return report
        if dry_run:
            return report  # a dry run never moves the cursor
        self._failed_runs.pop(report.first_cursor or 0, None)
        await self._finish(report)
        await self._commit(tools, report)
        return report

    def _cover_held(self, batch: list[HistoryEntry], owned: list[HistoryEntry],
                    report: DreamReport) -> None:
        """Stretch the report over the untrusted entries the cursor may move past, and log the
        refusal: they are read by nobody who can edit the long-term files."""
        report.first_cursor = batch[0].cursor
        if not owned or report.last_cursor == owned[-1].cursor:
            report.last_cursor = batch[-1].cursor  # every owner entry handled: the rest too
        last = report.last_cursor or 0
        held = [e for e in batch if e.cursor <= last and not self.trusted(e)]
        report.history_only = [e.cursor for e in held]
        if held:
            sources = sorted({f"{e.session_key or 'unknown session'} ({_who(e)})" for e in held})
            logger.warning("dream: refused to let history entries %s change SOUL.md, USER.md, "
                           "memory/MEMORY.md or skills: they come from guests or group chats (%s); "
                           "they stay in history only", ", ".join(f"#{e.cursor}" for e in held),
                           "; ".join(sources))

    def _give_up(self, report: DreamReport) -> bool:
        """Whether a batch that failed again is skipped now (so it is not retried forever)."""
        first, last = report.first_cursor or 0, report.last_cursor or 0
        failures = self._failed_runs[first] = self._failed_runs.get(first, 0) + 1
        if failures < MAX_FAILED_RUNS:
            logger.warning("dream failed on history entries #%d-#%d (%s); they stay unprocessed "
                           "and the next run tries again (%d of %d)", first, last, report.error,
                           failures, MAX_FAILED_RUNS, exc_info=True)
            return False
        del self._failed_runs[first]
        logger.error("dream failed on history entries #%d-#%d %d times (%s); skipping them — redo "
                     "with `lucid dream --from %d`", first, last, failures, report.error, first - 1)
        return True

    async def _finish(self, report: DreamReport) -> None:
        assert report.last_cursor is not None
        try:
            # Never move backwards: a --from rerun of an old range must not reopen later ones.
            await self.store.set_dream_cursor(max(self.store.dream_cursor(), report.last_cursor))
            await self.store.compact_history()
        except Exception as exc:  # noqa: BLE001 - reported, and the commit below still runs
            logger.exception("dream could not advance the cursor or compact history")
            report.error = report.error or f"cursor/compaction failed: {exc}"

    async def _commit_hand_edits(self) -> None:
        """Dream learns even when versioning fails: the failure is logged and kept for doctor."""
        try:
            await self.git.acommit_manual_edits()
        except GitStoreError as exc:
            logger.error("dream could not commit hand edits first (%s); dreaming on", exc)

    async def _commit(self, tools: DreamTools, report: DreamReport) -> None:
        report.changes = list(tools.changes)
        if not tools.changes:
            return
        message = f"dream: {self.store.timestamp()}, {len(tools.changes)} change(s)"
        try:
            report.commit = await self.git.acommit(message)
        except Exception as exc:  # noqa: BLE001 - the files changed; say the commit did not
            logger.exception("dream changed files but could not commit them")
            report.error = report.error or f"commit failed: {exc}"

    # ------------------------------------------------------------------ phases
    async def _read_files(self) -> dict[str, str]:
        return {rel: await self.store.read_text(which) for rel, which in FILES.items()}

    def _today(self) -> str:
        return self.store.now().strftime("%Y-%m-%d (%A)")

    async def _complete(self, messages: list[dict[str, Any]], report: DreamReport, *,
                        tools: list[dict[str, Any]] | None = None) -> ChatResult:
        result = await self.model.complete(messages, tools=tools, job="dream",
                                           max_tokens=self.config.max_completion_tokens)
        report.tokens += result.usage.total
        return result

    async def _analyse(self, batch: list[HistoryEntry],
                       report: DreamReport) -> tuple[list[HistoryEntry], list[Finding]] | None:
        """Phase 1 on the longest prefix of ``batch`` that fits the window.

        The prompt is sized with the turn's token estimate against the prompt budget; a
        batch the model still refuses as too long is halved. An entry that does not fit
        even alone is logged with its cursor and skipped (it cannot ever be processed).
        Returns the entries analysed and the findings, or None when all were skipped.
        ``report`` covers exactly the entries the cursor may move past.
        """
        files = await self._read_files()
        skills = await asyncio.to_thread(list_skills, self.workspace, self.builtin_skills)
        today = self._today()
        budget = self.config.prompt_budget

        def messages_for(entries: list[HistoryEntry]) -> list[dict[str, Any]]:
            return phase1_messages(entries, files, self.caps, skills, today)

        def fitting(entries: list[HistoryEntry]) -> list[HistoryEntry]:
            while len(entries) > 1 and tokens.count_messages(messages_for(entries)) > budget:
                entries = entries[: len(entries) // 2]
            return entries

        report.first_cursor = batch[0].cursor
        cap = len(batch)
        while True:
            candidate = await asyncio.to_thread(fitting, batch[:cap])
            report.last_cursor = candidate[-1].cursor
            too_long = len(candidate) == 1 and (
                await asyncio.to_thread(tokens.count_messages, messages_for(candidate))) > budget
            if not too_long:
                try:
                    result = await self._complete(messages_for(candidate), report)
                except PromptTooLong:
                    if len(candidate) > 1:
                        logger.warning("dream: entries #%d-#%d overflowed the window; halving the batch",
                                       candidate[0].cursor, candidate[-1].cursor)
                        cap = len(candidate) // 2
                        continue
                    too_long = True
                else:
                    findings = self._findings(result.content, candidate, report)
                    return candidate, findings
            entry = candidate[0]
            logger.error("dream: history entry #%d (session %s) does not fit the model's context "
                         "window even alone; skipped", entry.cursor, entry.session_key)
            report.skipped.append(entry.cursor)
            batch = batch[1:]
            cap = len(batch)
            if not batch:
                return None

    def _findings(self, content: str | None, batch: list[HistoryEntry],
                  report: DreamReport) -> list[Finding]:
        findings = parse_findings(content)
        forgotten = self.store.tombstones.matcher()
        kept = [f for f in findings if not forgotten.matches(f.text)]
        if len(kept) < len(findings):
            logger.info("dream: %d finding(s) matching a forgotten text dropped", len(findings) - len(kept))
        report.findings = [str(f) for f in kept]
        return kept

    async def _phase2(self, findings: list[Finding], tools: DreamTools, report: DreamReport) -> None:
        actionable = [f for f in findings if f.tag != "SKIP"]
        files = await self._read_files()
        skills = await asyncio.to_thread(list_skills, self.workspace, self.builtin_skills)
        messages: list[dict[str, Any]] = list(phase2_messages(
            actionable, files, self.caps, skills, self._today()))
        budget = self.config.dream.token_budget
        max_iterations = self.config.dream.max_iterations
        stats = LoopStats()

        async def execute(call: ToolCall) -> str:
            return await tools.call(call.name, call.arguments)

        try:
            outcome = await self.tool_loop.run(
                messages, tools=TOOL_SCHEMAS, execute=execute, job="dream",
                max_iterations=max_iterations, token_budget=budget - report.tokens,
                max_result_chars=MAX_READ_CHARS, max_tokens=self.config.max_completion_tokens,
                stop_on_consecutive_repeat=True, stats=stats)
        finally:
            report.tokens += stats.tokens
        report.stop_reason = {
            "done": "done",
            "cut": "done (the last answer was cut at the length limit)",
            "budget": f"token budget reached ({report.tokens} of {budget})",
            "repeated": f"repeated identical tool call ({outcome.repeated_tool})",
            "iterations": f"iteration limit ({max_iterations}) reached",
        }[outcome.stop]
        if outcome.stop not in ("done", "cut"):
            logger.warning("dream stopped: %s", report.stop_reason)


def _who(entry: HistoryEntry) -> str:
    return f"{entry.channel or '?'}, {entry.chat_type or '?'} chat, {'owner' if entry.owner else 'guest'}"
