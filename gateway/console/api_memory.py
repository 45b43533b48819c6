"""Memory files: read, edit (committed as ``manual: …``, refused on a stale etag), search.

Search uses the recall index (``memory_search``'s library) when the gateway has one, and a
plain case-insensitive grep of the files and history otherwise.

Per agent (``?agent=<id>``, see ``context``): each agent's files, its own git history and
recall index; a path is always taken relative to that agent's workspace.

Editable: SOUL.md, USER.md, memory/MEMORY.md and the daily notes ``memory/YYYY-MM-DD.md``
— nothing else, whatever path is sent. The etag is the SHA-256 of the file's bytes
("absent" for a missing file); a save carries the etag it was based on and is refused
with 409 when the file changed underneath (Dream, the agent, a hand edit).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lucidgate.config.fileio import atomic_write_text
from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.search.opening import OpenError, open_lines

if TYPE_CHECKING:
    from lucidgate.gateway.console.auth import ConsoleAuth
    from lucidgate.memory.gitstore import GitStore
    from lucidgate.memory.search.service import RecallService

logger = logging.getLogger(__name__)

CORE = ("SOUL.md", "USER.md", "memory/MEMORY.md")
DAILY = re.compile(r"^memory/\d{4}-\d{2}-\d{2}\.md$")
MAX_FILE_CHARS = 1_000_000


class MemoryFileInfo(BaseModel):
    path: str
    kind: str = Field(description="core or daily")
    size: int
    versioned: bool = Field(description="saving commits it to the memory git repository")


class MemoryFile(BaseModel):
    path: str
    text: str
    etag: str
    exists: bool


class SaveFile(BaseModel):
    text: str = Field(max_length=MAX_FILE_CHARS)
    etag: str = Field(description="the etag the edit was based on")


class Saved(BaseModel):
    path: str
    etag: str
    commit: str | None = Field(description="the new memory commit; None when nothing changed or unversioned")


class SearchHit(BaseModel):
    path: str
    line: int
    text: str
    score: float | None = None
    session_key: str | None = None
    start_line: int | None = Field(None, description="first line the hit spans (open it with /open)")
    end_line: int | None = None
    cursor: int | None = Field(None, description="a history entry's cursor (the history view shows it)")
    editable: bool = Field(False, description="/file opens it for editing; otherwise /open shows its lines")


class Opened(BaseModel):
    path: str
    text: str = Field(description="the lines, rendered; a conversation with the turns around it")


class SearchResult(BaseModel):
    query: str
    engine: str
    hits: list[SearchHit]


def allowed(path: str) -> bool:
    return path in CORE or bool(DAILY.match(path))


def etag_of(data: bytes | None) -> str:
    return "absent" if data is None else hashlib.sha256(data).hexdigest()


def _read(workspace: Path, path: str) -> bytes | None:
    try:
        return (workspace / path).read_bytes()
    except FileNotFoundError:
        return None


def _list(workspace: Path) -> list[MemoryFileInfo]:
    files = []
    for path in CORE:
        full = workspace / path
        files.append(MemoryFileInfo(path=path, kind="core", size=full.stat().st_size if full.exists() else 0,
                                    versioned=True))
    daily = sorted((workspace / "memory").glob("????-??-??.md"), reverse=True)
    for full in daily:
        rel = f"memory/{full.name}"
        if DAILY.match(rel):
            files.append(MemoryFileInfo(path=rel, kind="daily", size=full.stat().st_size, versioned=True))
    return files


def grep(workspace: Path, query: str, limit: int = 100) -> list[SearchHit]:
    """Case-insensitive substring search over the memory files and history (blocking)."""
    needle = query.casefold()
    hits: list[SearchHit] = []
    paths = [p.path for p in _list(workspace)] + ["memory/history.jsonl"]
    for rel in paths:
        try:
            text = (workspace / rel).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if needle in line.casefold():
                hits.append(SearchHit(path=rel, line=number, text=line[:400], editable=allowed(rel)))
                if len(hits) >= limit:
                    return hits
    return hits


@dataclass(frozen=True)
class MemoryParts:
    """One agent's memory as these routes reach it: its workspace, history and recall index."""

    workspace: Path
    git: GitStore
    recall: RecallService | None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock, compare=False)


def router(auth: ConsoleAuth, *, workspace: Path | None = None, git: GitStore | None = None,
           recall: RecallService | None = None, agents: PerAgent[MemoryParts] | None = None) -> APIRouter:
    """The routes over ``agents`` (each agent's parts), or over one agent's ``workspace``,
    ``git`` and ``recall``."""
    if agents is None:
        assert workspace is not None and git is not None, "one agent's workspace and git store, or agents"
        agents = PerAgent.one(MemoryParts(workspace, git, recall))
    api = APIRouter(prefix="/api/console/memory", tags=[TAG], dependencies=[owner_dependency(auth)],
                    responses=REFUSALS)
    agent = agents.dependency()

    def check(path: str) -> str:
        if not allowed(path):
            raise HTTPException(400, "editable: SOUL.md, USER.md, memory/MEMORY.md and memory/YYYY-MM-DD.md")
        return path

    @api.get("/files", response_model=list[MemoryFileInfo], summary="The memory files and daily notes")
    async def files(m: MemoryParts = agent) -> list[MemoryFileInfo]:
        return await asyncio.to_thread(_list, m.workspace)

    @api.get("/file", response_model=MemoryFile, summary="One memory file with its etag",
             responses={400: {"description": "Not a memory file."}})
    async def read(path: str = Query(..., max_length=200), m: MemoryParts = agent) -> JSONResponse:
        data = await asyncio.to_thread(_read, m.workspace, check(path))
        tag = etag_of(data)
        body = MemoryFile(path=path, text=(data or b"").decode("utf-8", errors="replace"), etag=tag,
                          exists=data is not None)
        return JSONResponse(body.model_dump(), headers={"ETag": f'"{tag}"'})

    @api.put("/file", response_model=Saved, summary="Save a memory file (commits `manual: …`)",
             responses={400: {"description": "Not a memory file."},
                        409: {"description": "The file changed since it was read; reload and redo the edit."}})
    async def save(body: SaveFile, path: str = Query(..., max_length=200), m: MemoryParts = agent) -> Saved:
        check(path)
        workspace, git = m.workspace, m.git
        async with m.write_lock:
            current = await asyncio.to_thread(_read, workspace, path)
            if etag_of(current) != body.etag:
                raise HTTPException(409, f"{path} changed since you opened it; reload it and redo your edit")
            text = body.text if body.text.endswith("\n") or not body.text else body.text + "\n"
            await asyncio.to_thread(atomic_write_text, workspace / path, text)
            try:  # the memory files and the daily notes are all versioned
                commit = await git.acommit_manual_edits()
            except GitStoreError as exc:
                raise HTTPException(503, f"saved, but not committed: {exc}") from None
            return Saved(path=path, etag=etag_of(text.encode("utf-8")), commit=commit)

    @api.get("/search", response_model=SearchResult, summary="Search memory and history")
    async def search(q: str = Query(..., min_length=1, max_length=200), m: MemoryParts = agent) -> SearchResult:
        recall = m.recall
        if recall is not None:
            try:
                found = await recall.search(q, k=50)
            except Exception as exc:  # noqa: BLE001 - fall back to grep, say why in the log
                logger.warning("recall search failed (%s); using grep", exc)
            else:
                return SearchResult(query=q, engine="recall", hits=[
                    SearchHit(path=str(h.path), line=_line_of(q, str(h.snippet), int(h.start_line or 0)),
                              text=str(h.snippet)[:400], score=float(h.score), session_key=h.session_key,
                              start_line=h.start_line, end_line=h.end_line, cursor=h.cursor,
                              editable=allowed(str(h.path)))
                    for h in found])
        hits = await asyncio.to_thread(grep, m.workspace, q)
        return SearchResult(query=q, engine="grep", hits=hits)

    @api.get("/open", response_model=Opened, summary="Open a search hit: its lines, a conversation with its turns",
             responses={400: {"description": "Not a memory source."}, 404: {"description": "No such file."}})
    async def open_hit(path: str = Query(..., max_length=300), start: int = Query(1, ge=1),
                       lines: int = Query(20, ge=1, le=400), m: MemoryParts = agent) -> Opened:
        try:
            text = await asyncio.to_thread(open_lines, m.workspace, path, start, lines)
        except OpenError as exc:
            raise HTTPException(404 if "does not exist" in str(exc) else 400, str(exc)) from None
        return Opened(path=path, text=text)

    return api


def _line_of(query: str, snippet: str, start: int) -> int:
    """The line of a chunk that holds the words searched for, so the editor opens right there;
    the chunk's first line when none does (a match by meaning)."""
    needle = query.casefold()
    for offset, line in enumerate(snippet.splitlines()):
        if needle in line.casefold():
            return start + offset
    return start
