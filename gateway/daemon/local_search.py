"""``POST /v1/local/search``: ``lucid memory search`` answered from the running gateway.

A search from the terminal needs the query embedded, and loading numpy and the embedder in
a fresh process costs most of a second. The gateway has both warm and keeps its index in
step with the files, so the CLI asks it over loopback (``local_client.search_running``) and
falls back to searching in-process only when no gateway answers.

The holder of the local token is the owner, so a search covers everything, as the CLI's
own does. It goes through the gateway's ``RecallService`` (the same file sync, lock and
worker thread as the ``memory_search`` tool): no second writer of the index, nothing on the
event loop. Chunks the gateway has not embedded yet are found by their words until its
background sync embeds them. Hits are ``Hit.to_wire()``: ``Hit.to_json()``'s fields with the score unrounded
and the chat type added, so the CLI prints them exactly as it prints its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from lucidgate.config.schema import SearchSource
from lucidgate.gateway.daemon.local_api import GUARD_RESPONSES, LocalError, local_router
from lucidgate.memory.search.hits import Scope, SearchError

if TYPE_CHECKING:
    from lucidgate.memory.search.service import RecallService

__all__ = ["LocalHit", "LocalSearch", "LocalSearchResult", "add_local_search"]

MAX_QUERY_CHARS = 10_000
MAX_SEARCH_BODY_BYTES = 4 * MAX_QUERY_CHARS + 1024  # JSON-escaped text may take ~4 bytes a char
DISABLED = "memory search is disabled (agents.defaults.memory.search.enabled)"
STOPPING = "the gateway is shutting down; search again (without it, lucid searches in-process)"


class LocalSearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for, in any language.")
    limit: int = Field(6, ge=1, le=50, description="How many hits at most.")
    sources: list[SearchSource] | None = Field(None, max_length=4,
                                             description="Only these sources; all when absent or empty.")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the search query is empty; say what to look for")
        return value


class LocalHit(BaseModel):
    source: str
    path: str
    start_line: int | None
    end_line: int | None
    cursor: int | None
    session_key: str | None
    date: str | None
    score: float = Field(description="Unrounded (the CLI rounds as it prints).")
    snippet: str
    origin: str
    chat_type: str | None


class LocalSearchResult(BaseModel):
    hits: list[LocalHit] = Field(description="Best first.")


def add_local_search(app: FastAPI, recall: RecallService | None, token: str) -> None:
    """Mount ``POST /v1/local/search`` behind the local token. ``recall`` None (search
    disabled in the config) answers 409 with the setting to change; a recall service that is
    stopping answers 503, which the CLI takes as "no gateway" and searches in-process."""
    router = local_router(token, MAX_SEARCH_BODY_BYTES)

    @router.post("/v1/local/search", response_model=LocalSearchResult, tags=["local"],
                 summary="Search everything remembered with the gateway's index (used by `lucid memory search`)",
                 responses={**GUARD_RESPONSES,
                            409: {"model": LocalError, "description": "Memory search is disabled."},
                            503: {"model": LocalError, "description": "Shutting down; search in-process."}})
    async def local_search(body: LocalSearch) -> Any:
        if recall is None:
            return JSONResponse({"detail": DISABLED}, 409)
        if recall.stopping:  # the index is closing: the CLI falls back to its own search
            return JSONResponse({"detail": STOPPING}, 503)
        # What the terminal user just wrote must be findable, as when the CLI searches itself
        # (it syncs first): files are synced before this query even if the watcher has not
        # reported them yet (a stat per file; embeddings follow in the background).
        recall.mark_dirty()
        try:
            hits = await recall.search(body.query, scope=Scope.everything(), k=body.limit,
                                       sources=body.sources or None)
        except SearchError as exc:
            return JSONResponse({"detail": str(exc)}, 422)
        return LocalSearchResult(hits=[LocalHit(**hit.to_wire()) for hit in hits])

    app.include_router(router)
