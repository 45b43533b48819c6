"""Every memory change is a commit: what the agent's tools change, once per turn.

``write_file`` and ``edit_file`` are wrapped (``RecordingTool``) so a successful write to a
versioned file — SOUL.md, USER.md, memory/MEMORY.md, a daily note ``memory/YYYY-MM-DD.md``
or anything under skills/ — is noted against the turn's session. ``exec`` is noted too (a
shell command may edit a memory file), with no path: its commit takes whatever versioned
file changed. When the turn ends (``CommittingRunner``), the notes become one commit
``agent: edit USER.md, write skills/x/SKILL.md (telegram:42)``, run in a worker thread, so a
turn with ten edits makes one commit and the event loop never waits for git.

The commit names the session whose turn caused it, marked ``guest`` when the turn was not
the owner's, and the chats whose words the turn read through ``memory_search`` when they
were not the owner's own (``(cli:local; after reading words from telegram:-100)``): a change
a guest's words led to says so in the history.

Edits made by hand are committed as ``manual: …`` — at start here, and by the file watcher
(through ``commit_manual_edits``) while the gateway runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from lucidgate.gateway.agent.runner import FinalHandler, TurnResult, TurnRunner
from lucidgate.gateway.tools.base import Tool, ToolRegistry, failed
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.gitstore import GitStore, is_tracked
from lucidgate.memory.sessions import Session

logger = logging.getLogger(__name__)

RECORDED = {"write_file": "write", "edit_file": "edit"}
MAX_SUBJECT = 200
MAX_SOURCES_NAMED = 4


class MemoryCommitter:
    def __init__(self, git: GitStore, workspace: Path) -> None:
        self.git = git
        self.workspace = workspace
        self._pending: dict[str, list[tuple[str, str | None]]] = {}
        self._untrusted: dict[str, set[str]] = {}  # session -> chats whose words its turn read
        self._tasks: set[asyncio.Task[str | None]] = set()
        self._lock = asyncio.Lock()  # commits one after another, in turn order

    def touched(self, session_key: str, action: str, path: str | None) -> None:
        """Note one change (``path`` relative to the workspace; None = "some file")."""
        self._pending.setdefault(session_key, []).append((action, path))

    def read_untrusted(self, session_key: str, sources: Collection[str]) -> None:
        """Note that the session's turn read words that are not the owner's (``sources``:
        the session keys they came from); its commit will name them."""
        self._untrusted.setdefault(session_key, set()).update(sources)

    def versioned(self, raw: str) -> str | None:
        """The workspace-relative form of ``raw`` when git versions it, else None."""
        try:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = self.workspace / path
            rel = path.resolve().relative_to(self.workspace.resolve()).as_posix()
        except (OSError, ValueError):
            return None
        return rel if is_tracked(rel) else None

    def turn_ended(self, session_key: str, *, guest: bool = False) -> asyncio.Task[str | None] | None:
        """Commit the session's notes (in the background); None when the turn changed nothing.
        ``guest``: the turn was not the owner's."""
        notes = self._pending.pop(session_key, None)
        untrusted = sorted(self._untrusted.pop(session_key, set()))
        if not notes:
            return None
        actions = list(dict.fromkeys(f"{a} {p}" if p else a for a, p in notes))
        message = f"agent: {', '.join(actions)}"
        if len(message) > MAX_SUBJECT:
            message = message[:MAX_SUBJECT - 1] + "…"
        who = f"{session_key}, guest" if guest else session_key
        if untrusted:
            named = untrusted[:MAX_SOURCES_NAMED] + (["…"] if len(untrusted) > MAX_SOURCES_NAMED else [])
            who += f"; after reading words from {', '.join(named)}"
        message += f" ({who})"
        paths = None if any(p is None for _, p in notes) else sorted({p for _, p in notes if p})
        task = asyncio.create_task(self._commit(message, paths), name=f"memory-commit-{session_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _commit(self, message: str, paths: list[str] | None) -> str | None:
        async with self._lock:
            try:
                return await asyncio.to_thread(self.git.commit, message, paths)
            except Exception:
                logger.exception("committing the agent's memory change failed (%s)", message)
                return None

    async def commit_manual_edits(self) -> str | None:
        """Commit edits made outside lucid as ``manual: <files>`` (at start, by the watcher)."""
        async with self._lock:
            try:
                return await asyncio.to_thread(self.git.commit_manual_edits)
            except Exception:
                logger.exception("committing manual memory edits failed")
                return None

    async def drain(self) -> None:
        """Wait for commits in flight (the gateway calls this after its last turn)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


class RecordingTool:
    """A file tool that tells the committer which versioned file it changed."""

    def __init__(self, inner: Tool, committer: MemoryCommitter, action: str) -> None:
        self._inner = inner
        self._committer = committer
        self._action = action

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def description(self) -> str:
        return self._inner.description

    @property
    def Params(self) -> type[BaseModel]:  # noqa: N802 — mirrors the Tool protocol
        return self._inner.Params

    @property
    def owner_only(self) -> bool:
        return self._inner.owner_only

    def __getattr__(self, name: str) -> Any:
        """The inner tool's optional members (``owner_power``, ``brings_outside_text``)."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def run(self, ctx: TurnContext, params: Any) -> str:
        result = await self._inner.run(ctx, params)
        if self._action == "exec":
            self._committer.touched(ctx.session_key, "exec", None)
            return result
        raw = getattr(params, "path", None)
        rel = self._committer.versioned(str(raw)) if raw else None
        if rel is not None and not failed(result):  # a failing tool raises; a wrapped one may return one
            self._committer.touched(ctx.session_key, self._action, rel)
        return result


def record_memory_writes(tools: ToolRegistry, committer: MemoryCommitter) -> None:
    """Wrap the registry's write_file, edit_file and exec so their changes get committed."""
    for name, action in {**RECORDED, "exec": "exec"}.items():
        tool = tools.get(name)
        if tool is not None:
            tools.register(RecordingTool(tool, committer, action))


class CommittingRunner(TurnRunner):
    """The turn runner that hands the turn's memory changes to the committer when it ends."""

    def __init__(self, *, committer: MemoryCommitter, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.committer = committer

    async def run(self, session: Session, ctx: TurnContext, *,
                  on_final: FinalHandler | None = None) -> TurnResult:
        try:
            return await super().run(session, ctx, on_final=on_final)
        finally:
            self.committer.turn_ended(ctx.session_key, guest=not ctx.is_owner)
