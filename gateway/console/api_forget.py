"""Forget from the console: what was forgotten (with un-forget), forget a text, purge it.

``POST /forget`` is ``/forget``: every place memory holds the text, kept forgotten by a
tombstone; a short text or one matching a large share of memory answers 409 until sent
again with ``confirm``. ``purge: true`` also rewrites the memory's git history (the page
warns first: it cannot be undone, and backups made before still hold the text). Un-forget
removes a tombstone; what was removed stays removed. Per agent (``?agent=<id>``): a forget
reaches that agent's memory, transcripts and index only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.memory.errors import DreamBusy, GitStoreError

if TYPE_CHECKING:
    from lucidgate.gateway.console.auth import ConsoleAuth
    from lucidgate.memory.dream import Dream
    from lucidgate.memory.gitstore import GitStore
    from lucidgate.memory.search.service import RecallService
    from lucidgate.memory.sessions import SessionStore
    from lucidgate.memory.store import MemoryStore

logger = logging.getLogger(__name__)


class ForgottenItem(BaseModel):
    id: str
    created: str
    by: str
    shown: str = Field(description="the text when kept, else '(hashed, N characters)'")


class ForgetRequest(BaseModel):
    text: str = Field(min_length=1, max_length=200)
    confirm: bool = Field(False, description="go ahead although the text is short or matches a lot")
    purge: bool = Field(False, description="also rewrite the memory's git history (cannot be undone)")
    keep_text: bool = Field(False, description="keep the text readable in the tombstone")


class ForgetResult(BaseModel):
    tombstone: str
    report: str = Field(description="what went from where, and what a forget does not reach")
    files: dict[str, int]
    history_lines: int
    sessions: int
    index_chunks: int
    purged: bool


@dataclass(frozen=True)
class ForgetParts:
    """Everywhere one agent's memory holds a text, and where its backups are."""

    dream: Dream
    store: MemoryStore
    git: GitStore
    sessions: SessionStore
    recall: RecallService | None
    backup_dirs: list[Path]


def router(auth: ConsoleAuth, *, agents: PerAgent[ForgetParts]) -> APIRouter:
    api = APIRouter(prefix="/api/console", tags=[TAG], dependencies=[owner_dependency(auth)],
                    responses=REFUSALS)
    agent = agents.dependency()

    @api.get("/forgotten", response_model=list[ForgottenItem], summary="What was forgotten")
    async def forgotten(f: ForgetParts = agent) -> list[ForgottenItem]:
        import asyncio

        stones = await asyncio.to_thread(f.store.tombstones.items)
        return [ForgottenItem(id=t.id, created=t.created, by=t.by, shown=t.shown()) for t in stones]

    @api.delete("/forgotten/{ident}", response_model=ForgottenItem, summary="Un-forget: drop a tombstone",
                responses={404: {"description": "No single tombstone has that id."}})
    async def unforget(ident: str, f: ForgetParts = agent) -> ForgottenItem:
        import asyncio

        removed = await asyncio.to_thread(f.store.tombstones.remove, ident)
        if removed is None:
            raise HTTPException(404, f"no single tombstone has the id {ident!r}")
        logger.info("un-forget [%s] (asked in the console)", removed.id)
        return ForgottenItem(id=removed.id, created=removed.created, by=removed.by, shown=removed.shown())

    @api.post("/forget", response_model=ForgetResult, summary="Forget a text everywhere (and optionally purge)",
              responses={409: {"description": "Short text or a large share of memory: send confirm."},
                         503: {"description": "Dream is running, or the purge failed."}})
    async def forget(body: ForgetRequest, f: ForgetParts = agent) -> ForgetResult:
        from lucidgate.memory.forget import ForgetNeedsConfirmation, describe, forget_exclusive

        try:
            report = await forget_exclusive(
                f.dream, f.store, f.git, body.text, index=f.recall.index if f.recall else None,
                sessions=f.sessions, confirm=body.confirm, keep_text=body.keep_text, purge=body.purge,
                by="the owner in the console", backup_dirs=f.backup_dirs)
        except ForgetNeedsConfirmation as exc:
            raise HTTPException(409, f"{exc}; send it again with confirm") from None
        except DreamBusy:
            raise HTTPException(503, "Dream is updating memory right now; try again in a minute") from None
        except GitStoreError as exc:
            raise HTTPException(503, f"forgotten, but the history was not purged: {exc}") from None
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return ForgetResult(tombstone=report.tombstone, report=describe(report), files=report.files,
                            history_lines=report.history_lines, sessions=report.sessions,
                            index_chunks=report.index_chunks, purged=bool(report.purged))

    return api
