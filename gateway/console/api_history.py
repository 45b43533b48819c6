"""The history timeline: ``memory/history.jsonl`` and its archive, newest first.

Each entry says whether Dream has processed it yet (its cursor is at or below
``memory/.dream_cursor``); the page groups entries by day and links each to the session
it came from. Filters: one session key, or one channel (the channel part of the key: a
non-default agent's keys start with its id). Per agent (``?agent=<id>``): that agent's history.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from fastapi import APIRouter, Query
from pydantic import BaseModel

from lucidgate.gateway.console.auth import ConsoleAuth
from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.config.fileio import read_int_file


class HistoryItem(BaseModel):
    cursor: int
    timestamp: str
    day: str
    content: str
    session_key: str | None
    channel: str | None
    processed: bool
    archived: bool


class HistoryPage(BaseModel):
    entries: list[HistoryItem]
    dream_cursor: int
    unprocessed: int
    more: bool
    sessions: list[str]


def _lines(path: Path, archived: bool) -> list[tuple[dict, bool]]:
    out: list[tuple[dict, bool]] = []
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    raw = json.loads(line)
                    int(raw["cursor"])
                except (ValueError, KeyError, TypeError):
                    continue
                if isinstance(raw, dict):
                    out.append((raw, archived))
    except FileNotFoundError:
        pass
    return out


def read_history(workspace: Path, *, session: str | None, channel: str | None,
                 before: int | None, limit: int, agent_prefix: str = "") -> HistoryPage:
    """Blocking: run in a worker thread."""
    memory = workspace / "memory"
    dream_cursor = read_int_file(memory / ".dream_cursor") or 0
    raw = _lines(memory / "history.jsonl", False)
    archive = memory / "archive"
    if archive.is_dir():
        for path in sorted(archive.glob("*.jsonl")):
            raw += _lines(path, True)
    seen: dict[int, tuple[dict, bool]] = {}
    for entry, archived in raw:
        seen.setdefault(int(entry["cursor"]), (entry, archived))
    keys = sorted({str(e["session_key"]) for e, _ in seen.values() if e.get("session_key")})
    items: list[HistoryItem] = []
    unprocessed = 0
    for cursor in sorted(seen, reverse=True):
        entry, archived = seen[cursor]
        key = entry.get("session_key")
        chan = str(key).removeprefix(agent_prefix).split(":", 1)[0] if key else None
        if cursor > dream_cursor:
            unprocessed += 1
        if session and key != session:
            continue
        if channel and chan != channel:
            continue
        if before is not None and cursor >= before:
            continue
        stamp = str(entry.get("timestamp", ""))
        items.append(HistoryItem(cursor=cursor, timestamp=stamp, day=stamp[:10], content=str(entry.get("content", "")),
                                 session_key=str(key) if key else None, channel=chan,
                                 processed=cursor <= dream_cursor, archived=archived))
    return HistoryPage(entries=items[:limit], dream_cursor=dream_cursor, unprocessed=unprocessed,
                       more=len(items) > limit, sessions=keys)


def router(auth: ConsoleAuth, *, workspace: Path | None = None,
           agents: PerAgent[tuple[Path, str]] | None = None) -> APIRouter:
    """Over each agent's (workspace, session key prefix), or one ``workspace``."""
    if agents is None:
        assert workspace is not None, "a workspace, or agents"
        agents = PerAgent.one((workspace, ""))
    api = APIRouter(prefix="/api/console", tags=[TAG], dependencies=[owner_dependency(auth)], responses=REFUSALS)
    agent = agents.dependency()

    @api.get("/history", response_model=HistoryPage, summary="The history timeline, newest first")
    async def history(session: str | None = Query(None, max_length=300),
                      channel: str | None = Query(None, max_length=50),
                      before: int | None = Query(None, ge=1, description="only entries below this cursor"),
                      limit: int = Query(200, ge=1, le=1000),
                      where: tuple[Path, str] = agent) -> HistoryPage:
        workspace, prefix = where
        return await asyncio.to_thread(read_history, workspace, session=session, channel=channel,
                                       before=before, limit=limit, agent_prefix=prefix)

    return api
