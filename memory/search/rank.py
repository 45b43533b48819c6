"""Hybrid ranking: merge keyword and vector candidates, decay old ones, diversify.

Pure functions over plain values, so every rule is testable without an index:

- keyword: BM25 (FTS5 reports it negated) squashed to 0..1 by ``x / (1 + x)``: absolute,
  so a threshold means the same for every query;
- vector: cosine rescaled above the embedder's ``baseline`` to 0..1;
- merged as ``vector_weight * v + text_weight * k`` (weights renormalised when one side is
  missing, e.g. keyword-only mode);
- temporal decay for dated chunks (notes, history, transcripts):
  ``score * (floor + (1 - floor) * 0.5 ** (age_days / half_life))`` — recent wins a tie,
  but a strong old match ("what did I say in March?") still beats a weak new one; undated
  files (MEMORY.md, USER.md, SOUL.md) are evergreen;
- MMR picks the next result by ``λ·score − (1−λ)·max similarity to those already picked``
  so near-duplicates don't crowd the list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

import numpy as np

__all__ = ["Candidate", "decay_factor", "merge", "mmr", "text_similarity"]

_WORDS = re.compile(r"\w+")


@dataclass(slots=True)
class Candidate:
    chunk_id: int
    text: str
    date: str | None
    bm25: float | None = None  # higher is better (FTS5's rank, negated)
    cosine: float | None = None
    vector: np.ndarray | None = None
    score: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)


def keyword_score(bm25: float) -> float:
    x = max(0.0, bm25)
    return x / (1.0 + x)


def vector_score(cosine: float, baseline: float) -> float:
    return float(min(1.0, max(0.0, (cosine - baseline) / max(1e-6, 1.0 - baseline))))


def decay_factor(day: str | None, today: date, half_life_days: float, floor: float = 0.5) -> float:
    if not day:
        return 1.0
    try:
        then = date.fromisoformat(day[:10])
    except ValueError:
        return 1.0
    age = max(0, (today - then).days)
    return float(floor + (1.0 - floor) * 0.5 ** (age / half_life_days))


def merge(candidates: Sequence[Candidate], *, vector_weight: float, text_weight: float,
          baseline: float, vectors_on: bool, today: date, half_life_days: float,
          decay_floor: float = 0.5) -> None:
    """Set ``score`` on every candidate (in place)."""
    vw = vector_weight if vectors_on else 0.0
    total = vw + text_weight
    if total <= 0:
        vw, total = (1.0, 1.0) if vectors_on else (0.0, 1.0)
        text_weight = 0.0 if vectors_on else 1.0
    for c in candidates:
        k = keyword_score(c.bm25) if c.bm25 is not None else 0.0
        v = vector_score(c.cosine, baseline) if (vectors_on and c.cosine is not None) else 0.0
        raw = (vw * v + text_weight * k) / total
        d = decay_factor(c.date, today, half_life_days, decay_floor)
        c.parts = {"vector": round(v, 4), "keyword": round(k, 4), "decay": round(d, 4)}
        c.score = raw * d


def _word_set(text: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(text.casefold()))


def _jaccard(a: str, wa: frozenset[str], b: str, wb: frozenset[str]) -> float:
    if not wa or not wb:
        return 1.0 if a.strip() == b.strip() else 0.0
    return len(wa & wb) / len(wa | wb)


def text_similarity(a: str, b: str) -> float:
    """Jaccard overlap of word sets: MMR's similarity when there are no vectors."""
    return _jaccard(a, _word_set(a), b, _word_set(b))


def mmr(candidates: Sequence[Candidate], k: int, lam: float, *, baseline: float = 0.0) -> list[Candidate]:
    """Pick ``k`` candidates by maximal marginal relevance (λ=1: plain score order).

    Vector similarity is rescaled above ``baseline`` like scores are, so "unrelated" is 0.
    Each candidate's redundancy (its maximum similarity to the picks so far) is updated
    against the newest pick only, and word sets are built once: k·n comparisons, not k²·n
    re-tokenisations — this is most of a keyword search's time on a 10,000-chunk index.
    """
    pool = sorted(candidates, key=lambda c: c.score, reverse=True)
    words = [_word_set(c.text) if c.vector is None else frozenset() for c in pool]
    redundancy = [0.0] * len(pool)
    picked: list[Candidate] = []
    while pool and len(picked) < k:
        best_i = max(range(len(pool)), key=lambda i: lam * pool[i].score - (1.0 - lam) * redundancy[i])
        chosen, chosen_words = pool.pop(best_i), words.pop(best_i)
        redundancy.pop(best_i)
        picked.append(chosen)
        for i, c in enumerate(pool):
            sim = _similarity(c, words[i], chosen, chosen_words, baseline)
            if sim > redundancy[i]:
                redundancy[i] = sim
    return picked


def _similarity(a: Candidate, wa: frozenset[str], b: Candidate, wb: frozenset[str], baseline: float) -> float:
    if a.vector is not None and b.vector is not None:
        return vector_score(float(np.dot(a.vector, b.vector)), baseline)
    return _jaccard(a.text, wa or _word_set(a.text), b.text, wb or _word_set(b.text))
