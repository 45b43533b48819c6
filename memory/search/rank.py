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
- **Time** (``time_factors``, what the query says about time from ``when.query_time``):
  recency decay ``floor + (1 - floor) * 0.5 ** (age / half_life)`` breaks ties towards the
  recent; a query that names a period ("in May", "last week", "before 2024") instead
  favours chunks dated inside it or a few days after (an event is told when it happens or
  shortly after: "last weekend" is often told on Monday), unless memory holds nothing from
  then (the user's sense of when is off; no preference then beats preferring nothing), and one that asks "when" gets no recency bias at all (an
  old event is the answer as often as a new one). "The first time" / "the last time" count
  age from the earliest / latest *strong* match (``STRONG_SHARE`` of the best score) rather
  than from today: of several tellings of one kind of event the asked-for one is the
  earliest or the latest, however long ago all of them were. Undated files (MEMORY.md,
  USER.md) are not decayed: they are the curated, kept-current summary, as fresh as their
  last edit.
- **Near-duplicates only** (``mmr``): MMR's redundancy counts only similarity above
  ``DUPLICATE_SIMILARITY``; two different exchanges of one conversation share a topic but
  say different things, and pushing the second one down hid half the answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING

from lucidgate.memory.search.when import Period, TimeIntent, query_time

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
# A match scoring at least this share of the best (before time) is one of the events a
# "first time" / "last time" question chooses among.
STRONG_SHARE = 0.7
# A chunk dated this many days after a named period still counts as from it (told afterwards).
TOLD_AFTER_DAYS = 7


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
                 half_life_days: float, floor: float, intent: TimeIntent | None = None) -> None:
    """Multiply each candidate's score by its time factor (see the module docstring).
    ``intent`` is what the query says about time; without it, ``query`` is read for it and
    ``period`` (if given) is the period it names."""
    if intent is None:
        read = query_time(query, today) if query else TimeIntent()
        intent = TimeIntent(period, read.order, read.asks_when)
    days = {c.chunk_id: _day(c.date) for c in candidates}
    pivot = _order_pivot(candidates, days, intent.order)
    within = _told_within(intent.period)
    named = within is not None
    if within is not None and not any(day is not None and within(day) for day in days.values()):
        within = None  # memory holds nothing from then: no preference (and no recency either)
    for c in candidates:
        day = days[c.chunk_id]
        d = 1.0  # undated: not decayed
        if day is not None:
            if within is not None:
                d = 1.0 if within(day) else floor
            elif pivot is None and not intent.asks_when and not named:
                d = decay_factor(c.date, today, half_life_days, floor)
            if pivot is not None:
                d *= floor + (1.0 - floor) * 0.5 ** (abs((day - pivot).days) / half_life_days)
        c.parts["time"] = round(d, 4)
        c.score *= d


def _told_within(period: Period | None) -> Callable[[date], bool] | None:
    """Whether a chunk's date falls in ``period`` or the few days after it
    (``TOLD_AFTER_DAYS``, at most the period's own length): what happened then is told then
    or shortly after."""
    if period is None:
        return None
    first, last = period
    if last < date.max - timedelta(days=TOLD_AFTER_DAYS):
        last += timedelta(days=min(TOLD_AFTER_DAYS, (last - first).days + 1))
    return lambda day: first <= day <= last


def _order_pivot(candidates: Sequence[Candidate], days: dict[int, date | None],
                 order: str | None) -> date | None:
    """The earliest ("first") or latest ("last") date among the strong matches."""
    if order is None or not candidates:
        return None
    best = max(c.score for c in candidates)
    strong = [d for c in candidates if c.score >= STRONG_SHARE * best
              and (d := days[c.chunk_id]) is not None]
    if not strong:
        return None
    return min(strong) if order == "first" else max(strong)


def merge(candidates: Sequence[Candidate], *, vector_weight: float, text_weight: float,
          baseline: float, vectors_on: bool, today: date, half_life_days: float,
          decay_floor: float = 0.5, query: str = "", period: Period | None = None,
          intent: TimeIntent | None = None) -> None:
    """``fuse`` then ``time_factors``: every candidate's final ``score``, in place."""
    fuse(candidates, vector_weight=vector_weight, text_weight=text_weight, baseline=baseline,
         vectors_on=vectors_on)
    time_factors(candidates, query=query, today=today, period=period,
                 half_life_days=half_life_days, floor=decay_floor, intent=intent)


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
                redundancy[i] = max(redundancy[i], _redundancy(
                    pool[i], word_set(i), picked[j], word_set(pick_index[j]), baseline))
            checked[i] = len(picked)
            value = lam * pool[i].score - (1.0 - lam) * redundancy[i]
            if value > best_value:
                best_at, best_value = at, value
        chosen = alive.pop(best_at)
        picked.append(pool[chosen])
        pick_index.append(chosen)
    return picked


def _redundancy(a: Candidate, wa: frozenset[str], b: Candidate, wb: frozenset[str], baseline: float) -> float:
    """Similarity above ``DUPLICATE_SIMILARITY``, rescaled to 0..1. Word sets whose sizes
    alone rule out a near-copy (Jaccard is at most the smaller size over the larger) are
    not intersected: in a keyword-only search that was most of MMR's time."""
    if (a.vector is None or b.vector is None) and wa and wb \
            and min(len(wa), len(wb)) <= DUPLICATE_SIMILARITY * max(len(wa), len(wb)):
        return 0.0
    sim = _similarity(a, wa, b, wb, baseline)
    return max(0.0, sim - DUPLICATE_SIMILARITY) / (1.0 - DUPLICATE_SIMILARITY)


def _similarity(a: Candidate, wa: frozenset[str], b: Candidate, wb: frozenset[str], baseline: float) -> float:
    if a.vector is not None and b.vector is not None:
        return vector_score(float(a.vector.dot(b.vector)), baseline)
    return _jaccard(a.text, wa or _word_set(a.text), b.text, wb or _word_set(b.text))
