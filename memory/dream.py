"""Dream: distil new history entries into the long-term memory files (DESIGN §5.3).

Two phases per run, over one batch of up to ``dream.maxBatchSize`` entries after
``.dream_cursor``:

1. *Analysis* — one tool-less call: history + current files + today's date -> tagged
   findings (``dream_prompts``).
2. *Editing* — the gateway's tool loop (handed in as ``ToolLoop``: limits, the
   repeated-call guard and the token cap live there) running ``dream_tools``, which apply
   the findings with surgical edits to exactly the files GitStore versions.

Whatever happens, the cursor then moves past the batch (a poisoned batch must not be
retried forever; its range is logged for ``lucid dream --from``), history is compacted,
and any change is committed as ``dream: <timestamp>, <n> change(s)`` so it can be undone.
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

from config.schema import AgentDefaults
from memory.dream_prompts import Finding, parse_findings, phase1_messages, phase2_messages
from memory.dream_tools import MAX_READ_CHARS, TOOL_SCHEMAS, DreamTools, list_skills
from memory.errors import DreamBusy
from memory.gitstore import GitStore
from memory.protocols import ChatModel, ChatResult, LoopStats, ToolCall, ToolLoop
from memory.store import HistoryEntry, MemoryStore, Which

logger = logging.getLogger(__name__)

__all__ = ["Dream", "DreamReport"]

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
        owner_sessions: Callable[[str], bool] | None = None,
    ) -> None:
        self.store = store
        self.git = git
        self.model = model
        self.tool_loop = tool_loop
        self.workspace = Path(workspace)
        self.config = config
        self._owner_sessions = owner_sessions
        self._lock = asyncio.Lock()
        # thread_local=False: acquired and released from different worker threads.
        self._file_lock = FileLock(self.workspace / "memory" / ".dream.lock", thread_local=False)
        self.caps = {"SOUL.md": config.memory.max_soul_chars,
                     "USER.md": config.memory.max_user_chars,
                     "memory/MEMORY.md": config.memory.max_memory_chars}

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def _is_owner(self, session_key: str | None) -> bool:
        if self._owner_sessions is None:
            return True
        return session_key is not None and self._owner_sessions(session_key)

    # ------------------------------------------------------------------ locking
    async def run(self, *, dry_run: bool = False, from_cursor: int | None = None) -> DreamReport:
        """Process one batch; raises ``DreamBusy`` at once if a Dream is already running."""
        async with self.exclusive():
            return await self._run(dry_run=dry_run, from_cursor=from_cursor)

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
        report.first_cursor, report.last_cursor = batch[0].cursor, batch[-1].cursor
        user_writable = any(self._is_owner(e.session_key) for e in batch)
        tools = DreamTools(self.workspace, self.caps, user_writable=user_writable)
        try:
            findings = await self._phase1(batch, report, user_writable)
            if dry_run:
                return report
            if any(f.tag != "SKIP" for f in findings):
                # Hand edits go into history first, so the dream commit holds only Dream's.
                await self.git.acommit_manual_edits()
                await self._phase2(findings, tools, report, user_writable)
            else:
                report.stop_reason = "done"
        except asyncio.CancelledError:
            await self._commit(tools, report)  # whatever was applied stays undoable
            raise
        except Exception as exc:  # noqa: BLE001 - any failure still moves the cursor on
            report.error = str(exc) or type(exc).__name__
            logger.warning(
                "dream failed on history entries #%d-#%d (%s); redo with `lucid dream --from %d`",
                report.first_cursor, report.last_cursor, report.error, report.first_cursor - 1,
                exc_info=True,
            )
        if dry_run:
            return report  # a dry run never moves the cursor, even when it failed
        await self._finish(report)
        await self._commit(tools, report)
        return report

    async def _finish(self, report: DreamReport) -> None:
        assert report.last_cursor is not None
        try:
            # Never move backwards: a --from rerun of an old range must not reopen later ones.
            await self.store.set_dream_cursor(max(self.store.dream_cursor(), report.last_cursor))
            await self.store.compact_history()
        except Exception as exc:  # noqa: BLE001 - reported, and the commit below still runs
            logger.exception("dream could not advance the cursor or compact history")
            report.error = report.error or f"cursor/compaction failed: {exc}"

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

    async def _phase1(self, batch: list[HistoryEntry], report: DreamReport,
                      user_writable: bool) -> list[Finding]:
        files = await self._read_files()
        skills = await asyncio.to_thread(list_skills, self.workspace)
        messages = phase1_messages(batch, files, self.caps, skills, self._today(), self._is_owner)
        result = await self._complete(messages, report)
        findings = parse_findings(result.content)
        if not user_writable and any(f.tag == "USER" for f in findings):
            logger.warning("dream: dropped [USER] findings from a batch with no owner entries")
            findings = [f for f in findings if f.tag != "USER"]
        report.findings = [str(f) for f in findings]
        return findings

    async def _phase2(self, findings: list[Finding], tools: DreamTools, report: DreamReport,
                      user_writable: bool) -> None:
        actionable = [f for f in findings if f.tag != "SKIP"]
        files = await self._read_files()
        skills = await asyncio.to_thread(list_skills, self.workspace)
        messages: list[dict[str, Any]] = list(phase2_messages(
            actionable, files, self.caps, skills, self._today(), user_writable))
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
