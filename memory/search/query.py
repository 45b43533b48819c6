"""Searching the recall index: scoped keyword and vector candidates, then hybrid ranking.

Scope is part of every SQL statement: a chat that is not the owner's private chat only
ever sees chunks whose ``session_key`` is its own (its history entries and transcript),
never MEMORY.md, USER.md, notes or other sessions; a trusted-only scope (auto-recall in the
owner's chat) sees only chunks of the owner's own origin. The vector side filters its matrix by
the same rule and the final row fetch applies the SQL predicate again, so a hit cannot
leak in through either path.

Vectors for the current model are held in memory as one float32 matrix, kept current from
the index's change log (``vector_cache``; 10,000 × 384 floats is 15 MB; a query is one
matrix-vector product). numpy loads with the first vector query: a keyword-only search
(auto-recall while the embedder is not loaded, as in a one-shot ``lucid agent -m``) never
needs it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection
from datetime import date
from typing import TYPE_CHECKING, Any

from lucidgate.memory.search.hits import Hit, Scope, SearchError, SearchSettings
from lucidgate.memory.search.common_words import selective_query
from lucidgate.memory.search.fts_text import fts_query
from lucidgate.memory.search.index import MemoryIndex
from lucidgate.memory.search.origin import TRUSTED
from lucidgate.memory.search.rank import Candidate, merge, mmr
from lucidgate.memory.search.when import TimeIntent, query_time

if TYPE_CHECKING:
    import numpy as np

    from lucidgate.memory.search.vector_cache import VectorCache

__all__ = ["Hit", "Scope", "SearchError", "SearchSettings", "search"]

SNIPPET_CHARS = 700
# Candidates taken from each side. Ranking is relative to the best candidate and lifts
# chunks next to strong ones, so it needs more than the k it returns to see the field:
# a small fixed floor (cheap: 50 rows) rather than a multiple of a small k.
POOL = 50


def _where(scope: Scope, sources: Collection[str] | None, alias: str = "c") -> tuple[str, list[Any]]:
    clauses, args = [], []
    if scope.session_key is not None:
        clauses.append(f"{alias}.session_key = ?")
        args.append(scope.session_key)
    if scope.trusted_only:
        clauses.append(f"{alias}.origin = ?")
        args.append(TRUSTED)
    if sources is not None:
        clauses.append(f"{alias}.source IN ({','.join('?' * len(sources))})")
        args.extend(sources)
    return (" AND " + " AND ".join(clauses)) if clauses else "", args


def search(index: MemoryIndex, query: str, *, k: int = 6, scope: Scope = Scope(),
           sources: Collection[str] | None = None, settings: SearchSettings = SearchSettings(),
           today: date | None = None, vectors_if_ready: bool = False,
           stop: Callable[[], bool] | None = None) -> list[Hit]:
    """The best ``k`` hits for ``query`` within ``scope``, best first.

    ``vectors_if_ready``: use the vector side only if the embedder can answer at once
    (loaded, idle, local) — auto-recall must never wait for a model.
    ``stop``: the caller gave up — no further step (and no index lock) is taken; [] instead.
    """
    def gave_up() -> bool:
        return stop is not None and stop()

    if not query or not query.strip():
        raise SearchError("the search query is empty; say what to look for")
    k = max(1, min(50, k))
    wanted = max(POOL, 4 * k)
    src = tuple(sources) if sources else None
    cands: dict[int, Candidate] = {}
    use_vectors = index.vectors_on and index.embedder is not None
    if use_vectors and vectors_if_ready and index.embedder is not None:
        use_vectors = index._dim is not None and index.embedder.ready()
    embedding = _Embedding(index, query) if use_vectors and not gave_up() else None
    intent = _anchored(index, query_time(query, today or date.today()), scope, src)
    if gave_up():
        return []
    with index._lock:
        conn = index.conn()
        where, args = _where(scope, src)
        expr = selective_query(index, conn, query)
        if expr is not None:
            # Unscoped (the owner's usual case), FTS5 ranks alone: joining chunks first makes
            # SQLite fetch a row for every match before the sort. Text and date come from
            # the scoped row fetch below either way.
            sql = ("SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
                   "ORDER BY bm25(chunks_fts) LIMIT ?") if not where else (
                   "SELECT c.id, -bm25(chunks_fts) FROM chunks_fts "
                   "JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ?"
                   f"{where} ORDER BY bm25(chunks_fts) LIMIT ?")
            for cid, bm25 in conn.execute(sql, [expr, *args, wanted]).fetchall():
                cands[cid] = Candidate(cid, "", None, bm25=float(bm25))
    vectors_on = False
    if embedding is not None and not gave_up():
        qvec = embedding.result()
        if qvec is not None and not gave_up():
            vectors_on = True
            _vector_candidates(index, qvec, scope, src, wanted, cands)
    if gave_up():
        return []
    rows_by_id = _rows(index, list(cands), scope, src)
    cands = {cid: c for cid, c in cands.items() if cid in rows_by_id}
    for cid, cand in cands.items():
        row = rows_by_id[cid]
        cand.text, cand.date, cand.group = row[8], row[7], (row[2], row[6], row[7])
    if not cands:
        return []
    baseline = index.embedder.baseline if index.embedder is not None else 0.0
    today = today or date.today()
    # A word match always counts; a candidate found by meaning alone must be closer to the
    # query than unrelated texts are (the embedder's baseline).
    relevant = [c for c in cands.values() if c.bm25 is not None
                or (vectors_on and c.cosine is not None and c.cosine > baseline)]
    merge(relevant, vector_weight=settings.vector_weight, text_weight=settings.text_weight,
          baseline=baseline, vectors_on=vectors_on, today=today,
          half_life_days=settings.half_life_days, decay_floor=settings.decay_floor,
          query=query, intent=intent)
    picked = mmr(relevant, k, settings.mmr_lambda, baseline=baseline)
    # MMR decides *which* k; they are listed by score so "best first" agrees with the scores.
    picked.sort(key=lambda c: c.score, reverse=True)
    return [_hit(rows_by_id[c.chunk_id], c.score) for c in picked]


def _anchored(index: MemoryIndex, intent: TimeIntent, scope: Scope,
              sources: Collection[str] | None) -> TimeIntent:
    """"before / after <event>": the event's date is the day of the best keyword match for
    its words (in the same scope), and the period runs up to or from that day. One FTS
    lookup; an event memory does not mention leaves the intent without a period."""
    if intent.anchor is None or intent.period is not None:
        return intent
    kind, words = intent.anchor
    expr = fts_query(words)
    if expr is None:
        return intent
    where, args = _where(scope, sources)
    with index._lock:
        row = index.conn().execute(
            "SELECT c.date FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ? AND c.date IS NOT NULL{where} "
            "ORDER BY bm25(chunks_fts) LIMIT 1", [expr, *args]).fetchone()
    try:
        day = date.fromisoformat(row[0][:10]) if row else None
    except ValueError:
        day = None
    if day is None:
        return intent
    period = (date.min, day) if kind == "before" else (day, date.max)
    return TimeIntent(period, intent.order, intent.asks_when, intent.anchor)


class _Embedding:
    """The query's vector, computed in a thread while the keyword side runs: the embedder is
    native code and SQLite's FTS5 too, both release the GIL, so on two cores a hybrid search
    takes about the longer of the two instead of their sum. (A search given up leaves the
    thread to finish on its own; it only computes a vector.)"""

    def __init__(self, index: MemoryIndex, query: str) -> None:
        self._vec: np.ndarray | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(index, query), daemon=True,
                                        name="recall-query-vector")
        self._thread.start()

    def _run(self, index: MemoryIndex, query: str) -> None:
        try:
            self._vec = _query_vector(index, query)
        except BaseException as exc:  # handed to the searching thread, which raises it
            self._error = exc

    def result(self) -> np.ndarray | None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._vec


def _query_vector(index: MemoryIndex, query: str) -> np.ndarray | None:
    import numpy as np

    dim = index.dimension()
    if dim is None or index.embedder is None:
        return None
    try:
        vec = index.embedder.query(query)
    except Exception as exc:
        index._fail(f"{type(exc).__name__}: {exc}")
        return None
    if vec.shape != (dim,) or not np.isfinite(vec).all():
        index._fail(f"query vector of shape {vec.shape}, expected ({dim},)")
        return None
    return vec


def _vectors(index: MemoryIndex, conn: sqlite3.Connection) -> VectorCache | None:
    """The index's in-memory vectors for the current model, brought up to date."""
    from lucidgate.memory.search.vector_cache import VectorCache

    emb = index.embedder
    dim = index.dimension()
    if emb is None or dim is None:
        return None
    cache = index.vector_cache
    if not isinstance(cache, VectorCache) or cache.key != (emb.provider, emb.model, dim):
        cache = index.vector_cache = VectorCache(emb.provider, emb.model, dim)
    cache.refresh(conn)
    return cache


def _vector_candidates(index: MemoryIndex, qvec: np.ndarray, scope: Scope,
                       sources: Collection[str] | None, wanted: int,
                       cands: dict[int, Candidate]) -> None:
    """The ``wanted`` nearest chunks in scope, and the cosine of every keyword candidate.

    One product over the whole (contiguous) matrix, then the scope and the deleted rows
    are masked out of the scores: cheaper than gathering the allowed rows into a copy
    first, which costs a full pass over the matrix plus an allocation of its size."""
    import numpy as np

    with index._lock:
        conn = index.conn()
        cache = _vectors(index, conn)
        if cache is None or not len(cache):
            return
        ids, keys, srcs, origins, allowed, matrix = cache.columns()
        found_rows = [r for cid in cands if (r := cache.row_of(cid)) is not None]
    if scope.session_key is not None:
        allowed &= keys == scope.session_key
    if scope.trusted_only:
        allowed &= origins == TRUSTED
    if sources is not None:
        allowed &= np.isin(srcs, list(sources))
    live = int(np.count_nonzero(allowed))
    if not live:
        return
    if live * 4 < len(ids):  # a chat's own scope: a few rows, gathered
        rows = np.flatnonzero(allowed)
        sims = matrix[rows] @ qvec
        order = np.argsort(-sims)[:wanted] if len(sims) <= wanted else np.argpartition(-sims, wanted)[:wanted]
        top = rows[order]
    else:
        sims_all = matrix @ qvec
        sims_all[~allowed] = -np.inf
        top = np.argpartition(-sims_all, wanted)[:wanted] if len(sims_all) > wanted else np.arange(len(sims_all))
        top = top[allowed[top]]
    # Keyword candidates get their cosine too: both signals for every candidate.
    extra = [r for r in found_rows if allowed[r]]
    picked = np.unique(np.concatenate([top, np.asarray(extra, dtype=np.int64)])) if extra else top
    cosines = matrix[picked] @ qvec
    for row, cosine in zip(picked.tolist(), cosines.tolist(), strict=True):
        cid = int(ids[row])
        cand = cands.get(cid)
        if cand is None:
            cand = cands[cid] = Candidate(cid, "", None)
        cand.cosine = float(cosine)
        cand.vector = matrix[row]


def _rows(index: MemoryIndex, ids: list[int], scope: Scope,
          sources: Collection[str] | None) -> dict[int, tuple[Any, ...]]:
    """The candidates' rows, fetched under the scope predicate once more; the asking chat's
    live part is dropped here (a handful of rows), which keeps the FTS query unjoined."""
    where, args = _where(scope, sources)
    out: dict[int, tuple[Any, ...]] = {}
    with index._lock:
        conn = index.conn()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for r in conn.execute(
                    "SELECT c.id, c.source, c.path, c.start_line, c.end_line, c.cursor, "
                    f"c.session_key, c.date, c.text, c.origin, c.chat_type FROM chunks c WHERE c.id IN "
                    f"({','.join('?' * len(part))}){where}", part + args):
                if not scope.is_live(r[6], r[3]):
                    out[r[0]] = r
    return out


def _hit(r: tuple[Any, ...], score: float) -> Hit:
    text = r[8]
    snippet = text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS - 1] + "…"
    return Hit(r[1], r[2], r[3], r[4], r[5], r[6], r[7], score, snippet, text, origin=r[9], chat_type=r[10])
