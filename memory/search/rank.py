"""Hybrid ranking: fuse keyword and vector evidence, weigh time, skip near-duplicates.

Pure functions over plain values, so every rule is testable without an index. The rules,
each with the reason it holds for anyone's memory, not just one corpus:

- **Both signals for every candidate.** A chunk found by words also gets its cosine and a
  chunk found by meaning keeps keyword 0 (it matched no query word): a candidate is never
  judged on one half because of which list it came from.
- **Each signal relative to this query's best** (``fuse``): BM25 divided by the best BM25
  among the candidates, cosine rescaled between the embedder's ``baseline`` (unrelated
  texts) and the best cosine. Raw BM25 grows with query length and corpus statistics and
  e5's cosines crowd into a narrow band, so neither has a fixed scale; relative to the best
  match both mean "how close to the strongest evidence this query has". Min-max fusion of
  this kind (the convex combination studied by Bruch et al., 2023) keeps how far apart
  scores are, which reciprocal-rank fusion throws away.
- **A strong neighbour lifts a chunk** (``GROUP_WEIGHT``): chunks from one file on one day
  (a day's conversation, a note) share a topic, so a chunk in the group that holds the
  best match is likelier to hold the rest of the answer than an equally scored stray one.
- **The score stays absolute**: the fused value is scaled so the best candidate keeps its
  absolute relevance (``absolute``), so thresholds such as auto-recall's minimum mean the
  same for every query, and a query nothing matches well gets low scores throughout.
- **Time** (``time_factors``): recency decay ``floor + (1 - floor) * 0.5 ** (age / half_life)``
  breaks ties towards the recent; a query that names a period ("in May", "last week")
  instead favours chunks dated inside it, and one that asks "when" gets no recency bias at
  all (an old event is the answer as often as a new one). Undated files (MEMORY.md, USER.md)
  are not decayed: they are the curated, kept-current summary, as fresh as their last edit.
- **Near-duplicates only** (``mmr``): MMR's redundancy counts only similarity above
  ``DUPLICATE_SIMILARITY``; two different exchanges of one conversation share a topic but
  say different things, and pushing the second one down hid half the answers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

from lucidgate.memory.search.when import Period

if TYPE_CHECKING:  # vectors are numpy arrays; a keyword-only search never loads numpy
    import numpy as np

__all__ = ["Candidate", "absolute", "decay_factor", "fuse", "merge", "mmr", "text_similarity",
           "time_factors"]

_WORDS = re.compile(r"\w+")
# How much the best score of a chunk's group adds to it (a fifth: a tie-breaker that can
# move a chunk a few places, never a weak chunk above a strong one elsewhere).
GROUP_WEIGHT = 0.2
# Redundancy below this (0..1, vector similarity rescaled above the baseline, or word
# overlap) is no redundancy: below three-quarters overlap two texts say different things.
DUPLICATE_SIMILARITY = 0.75
_ASKS_WHEN = re.compile(r"\bwhen\b|\bwhat (?:date|day|time|year|month)\b|\bhow long ago\b", re.I)


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
    group: tuple[object, ...] = ()  # chunks that share a topic: (path, session, day)


def keyword_score(bm25: float) -> float:
    """Absolute keyword strength 0..1 (``x / (1 + x)``), for ``absolute`` only."""
    x = max(0.0, bm25)
    return x / (1.0 + x)


def vector_score(cosine: float, baseline: float) -> float:
    return float(min(1.0, max(0.0, (cosine - baseline) / max(1e-6, 1.0 - baseline))))


def _weights(vector_weight: float, text_weight: float, vectors_on: bool) -> tuple[float, float]:
    vw = vector_weight if vectors_on else 0.0
    if vw + text_weight <= 0:
        return (1.0, 0.0) if vectors_on else (0.0, 1.0)
    return vw / (vw + text_weight), text_weight / (vw + text_weight)


def absolute(c: Candidate, vw: float, tw: float, baseline: float) -> float:
    """How strong a candidate's evidence is on a fixed scale (0..1)."""
    k = keyword_score(c.bm25) if c.bm25 is not None else 0.0
    v = vector_score(c.cosine, baseline) if c.cosine is not None else 0.0
    return vw * v + tw * k


def fuse(candidates: Sequence[Candidate], *, vector_weight: float, text_weight: float,
         baseline: float, vectors_on: bool) -> None:
    """Set ``score`` (relevance before time) on every candidate, in place."""
    if not candidates:
        return
    vw, tw = _weights(vector_weight, text_weight, vectors_on)
    best_bm25 = max((c.bm25 for c in candidates if c.bm25 is not None), default=0.0)
    cosines = [c.cosine for c in candidates if c.cosine is not None] if vectors_on else []
    top_cos = max(cosines, default=baseline)
    spread = max(1e-6, top_cos - baseline)
    for c in candidates:
        k = max(0.0, c.bm25) / best_bm25 if c.bm25 is not None and best_bm25 > 0 else 0.0
        v = min(1.0, max(0.0, (c.cosine - baseline) / spread)) if cosines and c.cosine is not None else 0.0
        c.parts = {"vector": round(v, 4), "keyword": round(k, 4)}
        c.score = vw * v + tw * k
    best_in_group: dict[tuple[object, ...], float] = {}
    for c in candidates:
        if c.group:
            best_in_group[c.group] = max(best_in_group.get(c.group, 0.0), c.score)
    fused = [c.score + GROUP_WEIGHT * best_in_group.get(c.group, c.score) for c in candidates]
    top = max(fused)
    anchor = max(absolute(c, vw, tw, baseline) for c in candidates)
    for c, value in zip(candidates, fused, strict=True):
        c.score = anchor * value / top if top > 0 else 0.0


def decay_factor(day: str | None, today: date, half_life_days: float, floor: float = 0.5) -> float:
    if not day:
        return 1.0
    try:
        then = date.fromisoformat(day[:10])
    except ValueError:
        return 1.0
    age = max(0, (today - then).days)
    return float(floor + (1.0 - floor) * 0.5 ** (age / half_life_days))


def _day(value: str | None) -> date | None:
    try:
        return date.fromisoformat(value[:10]) if value else None
    except ValueError:
        return None


def time_factors(candidates: Sequence[Candidate], *, query: str, today: date, period: Period | None,
                 half_life_days: float, floor: float) -> None:
    """Multiply each candidate's score by its time factor (see the module docstring)."""
    factors: dict[int, float] = {}
    for c in candidates:
        day = _day(c.date)
        if day is None:
            continue
        if period is not None:
            factors[c.chunk_id] = 1.0 if period[0] <= day <= period[1] else floor
        elif _ASKS_WHEN.search(query):
            factors[c.chunk_id] = 1.0
        else:
            factors[c.chunk_id] = decay_factor(c.date, today, half_life_days, floor)
    for c in candidates:
        d = factors.get(c.chunk_id, 1.0)  # undated: not decayed
        c.parts["time"] = round(d, 4)
        c.score *= d


def merge(candidates: Sequence[Candidate], *, vector_weight: float, text_weight: float,
          baseline: float, vectors_on: bool, today: date, half_life_days: float,
          decay_floor: float = 0.5, query: str = "", period: Period | None = None) -> None:
    """``fuse`` then ``time_factors``: every candidate's final ``score``, in place."""
    fuse(candidates, vector_weight=vector_weight, text_weight=text_weight, baseline=baseline,
         vectors_on=vectors_on)
    time_factors(candidates, query=query, today=today, period=period,
                 half_life_days=half_life_days, floor=decay_floor)


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

    Redundancy is similarity above ``DUPLICATE_SIMILARITY``, rescaled to 0..1 (vector
    similarity is first rescaled above ``baseline``, so "unrelated" is 0). Redundancy never
    raises a value, so each round scans candidates in score order only until ``λ·score``
    cannot beat the best value found; redundancy (and a text's word set) is worked out only
    for the candidates scanned, against the picks made since it was last brought up to date.
    The result is exactly MMR's, at the cost of the few candidates near the top.
    """
    pool = sorted(candidates, key=lambda c: c.score, reverse=True)
    words: dict[int, frozenset[str]] = {}
    redundancy = [0.0] * len(pool)
    checked = [0] * len(pool)  # how many picks each candidate's redundancy covers
    alive = list(range(len(pool)))
    picked: list[Candidate] = []
    pick_index: list[int] = []

    def word_set(i: int) -> frozenset[str]:
        if i not in words:
            words[i] = _word_set(pool[i].text) if pool[i].vector is None else frozenset()
        return words[i]

    while alive and len(picked) < k:
        best_at, best_value = 0, float("-inf")
        for at, i in enumerate(alive):
            if lam * pool[i].score - 1e-12 <= best_value:
                break
            for j in range(checked[i], len(picked)):
                sim = _similarity(pool[i], word_set(i), picked[j], word_set(pick_index[j]), baseline)
                sim = max(0.0, sim - DUPLICATE_SIMILARITY) / (1.0 - DUPLICATE_SIMILARITY)
                redundancy[i] = max(redundancy[i], sim)
            checked[i] = len(picked)
            value = lam * pool[i].score - (1.0 - lam) * redundancy[i]
            if value > best_value:
                best_at, best_value = at, value
        chosen = alive.pop(best_at)
        picked.append(pool[chosen])
        pick_index.append(chosen)
    return picked


def _similarity(a: Candidate, wa: frozenset[str], b: Candidate, wb: frozenset[str], baseline: float) -> float:
    if a.vector is not None and b.vector is not None:
        return vector_score(float(a.vector.dot(b.vector)), baseline)
    return _jaccard(a.text, wa or _word_set(a.text), b.text, wb or _word_set(b.text))
