"""The Dream log: every memory commit with its diff, restore, and "Run Dream now".

A restore is ``GitStore.restore``: a NEW commit bringing the files back to their state
before the chosen one (history is never rewritten), and only with ``confirm: true``. A
console-started Dream runs as a task; its progress is the Dream's own log lines, and its
result names the commit it made so the page can show that diff. Per agent
(``?agent=<id>``): each agent's memory history, its own Dream and its own run in progress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.gateway.console.diff import FileDiff, parse_patch
from lucidgate.memory.errors import DreamBusy, GitStoreError

if TYPE_CHECKING:
    from lucidgate.gateway.console.auth import ConsoleAuth
    from lucidgate.memory.dream import Dream
    from lucidgate.memory.gitstore import GitStore
    from lucidgate.memory.store import MemoryStore

logger = logging.getLogger(__name__)


class CommitItem(BaseModel):
    sha: str
    short: str
    message: str
    kind: str = Field(description="dream, manual, agent, forget, restore, init …")
    when: str
    files: list[str]


class CommitDetail(CommitItem):
    diff: list[FileDiff]


class RestoreRequest(BaseModel):
    confirm: bool = Field(description="must be true: the page asks first")


class Restored(BaseModel):
    commit: str
    message: str


class DreamRun(BaseModel):
    running: bool
    started_s_ago: float | None = None
    progress: list[str] = Field(default_factory=list)
    summary: str | None = None
    error: str | None = None
    commit: str | None = None


class _Progress(logging.Handler):
    """Collects the Dream's own log lines while a console-started run is going."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage()[:300])
            del self.lines[:-50]
        except Exception:  # noqa: BLE001 - logging must never raise
            pass


class DreamRunner:
    def __init__(self, dream: Dream, store: MemoryStore) -> None:
        self.dream = dream
        self.store = store
        self.state = DreamRun(running=False)
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0

    def start(self) -> DreamRun:
        if self.dream.running or (self._task is not None and not self._task.done()):
            raise HTTPException(409, "a Dream is already running; watch its progress here")
        self.state = DreamRun(running=True, progress=["starting Dream"])
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="console-dream")
        return self.view()

    def view(self) -> DreamRun:
        shown = self.state.model_copy()
        if self._started:
            shown.started_s_ago = round(time.monotonic() - self._started, 1)
        return shown

    async def _run(self) -> None:
        handler = _Progress(self.state.progress)
        watched = [logging.getLogger(f"lucidgate.memory.{n}") for n in ("dream", "dream_tools", "gitstore")]
        levels = [log.level for log in watched]
        for log in watched:
            log.addHandler(handler)
            if log.getEffectiveLevel() > logging.INFO:
                log.setLevel(logging.INFO)  # only while this run lasts; restored below
        try:
            store = self.store
            await store.refresh()
            self.state.progress.append(f"{store.unprocessed_count()} history entries waiting; "
                                       f"asking the model what is worth keeping")
            report = await self.dream.run()
            self.state.summary = report.summary()
            self.state.error = report.error
            self.state.commit = report.commit
        except DreamBusy as exc:
            self.state.error = str(exc) or "a Dream is already running"
        except Exception as exc:
            logger.exception("console-started Dream failed")
            self.state.error = str(exc) or type(exc).__name__
        finally:
            for log, level in zip(watched, levels):
                log.removeHandler(handler)
                log.setLevel(level)
            self.state.running = False
            self.state.progress.append("finished")


def _kind(message: str) -> str:
    head, sep, _ = message.partition(":")
    return head.strip().lower() if sep and " " not in head.strip() else "other"


def _item(info: object) -> CommitItem:
    from lucidgate.memory.gitstore import CommitInfo

    assert isinstance(info, CommitInfo)
    return CommitItem(sha=info.sha, short=info.short, message=info.message, kind=_kind(info.message),
                      when=info.when.isoformat(), files=list(info.files))


class DreamParts:
    """One agent's memory history and Dream, with the console's run of it."""

    def __init__(self, git: GitStore, dream: Dream, store: MemoryStore) -> None:
        self.git, self.dream = git, dream
        self.runner = DreamRunner(dream, store)


def router(auth: ConsoleAuth, *, git: GitStore | None = None, dream: Dream | None = None,
           store: MemoryStore | None = None, agents: PerAgent[DreamParts] | None = None) -> APIRouter:
    """Over each agent's ``DreamParts``, or one agent's ``git``, ``dream`` and ``store``."""
    if agents is None:
        assert git is not None and dream is not None and store is not None, "one agent's parts, or agents"
        agents = PerAgent.one(DreamParts(git, dream, store))
    api = APIRouter(prefix="/api/console/dream", tags=[TAG], dependencies=[owner_dependency(auth)],
                    responses=REFUSALS)
    agent = agents.dependency()

    @api.get("/commits", response_model=list[CommitItem], summary="Every memory commit, newest first")
    async def commits(limit: int = Query(100, ge=1, le=1000), d: DreamParts = agent) -> list[CommitItem]:
        return [_item(i) for i in await d.git.alog(limit)]

    @api.get("/commits/{sha}", response_model=CommitDetail, summary="One commit with its per-file diff",
             responses={404: {"description": "No such commit in the memory history."}})
    async def commit(sha: str, d: DreamParts = agent) -> CommitDetail:
        git = d.git
        try:
            patch = await git.adiff(sha)
        except GitStoreError as exc:
            raise HTTPException(404, str(exc)) from None
        found = [i for i in await git.alog(1000) if i.sha.startswith(sha.lower())]
        if not found:
            raise HTTPException(404, f"unknown commit {sha!r}")
        return CommitDetail(**_item(found[0]).model_dump(), diff=parse_patch(patch, await git.achanges(sha)))

    @api.post("/commits/{sha}/restore", response_model=Restored, status_code=201,
              summary="Undo a commit: a new commit with the files as they were before it",
              responses={400: {"description": "Not confirmed, or nothing to restore."},
                         409: {"description": "A Dream is running; try when it is done."}})
    async def restore(sha: str, body: RestoreRequest, d: DreamParts = agent) -> Restored:
        git, dream = d.git, d.dream
        if not body.confirm:
            raise HTTPException(400, "restoring needs confirm: true")
        try:
            async with dream.exclusive():
                new = await git.arestore(sha)
        except DreamBusy as exc:
            raise HTTPException(409, str(exc) or "a Dream is running; try again when it is done") from None
        except GitStoreError as exc:
            raise HTTPException(400, str(exc)) from None
        return Restored(commit=new, message=f"restore: before {sha[:8]}")

    @api.post("/run", response_model=DreamRun, status_code=202, summary="Run Dream now",
              responses={409: {"description": "A Dream is already running."}})
    async def run(d: DreamParts = agent) -> DreamRun:
        return d.runner.start()

    @api.get("/run", response_model=DreamRun, summary="The console-started Dream's progress and result")
    async def run_state(d: DreamParts = agent) -> DreamRun:
        view = d.runner.view()
        if not view.running and d.dream.running:
            view.running = True
            view.progress = [*view.progress, "a scheduled Dream is running"]
        return view

    return api
