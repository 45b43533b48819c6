"""Textbook rankings over the windows an index made: BM25, plain cosine, and their RRF.

The yardsticks ``bench_recall_quality.py`` holds lucid's hybrid search against. They see
the same window texts and the same vectors as the index (read from its SQLite file), so a
difference in recall is a difference in ranking, not in what was indexed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from lucidgate.memory.search.fts_text import query_terms
from lucidgate.memory.search.index import MemoryIndex

_WORD = re.compile(r"\w+")
RRF_K = 60  # the constant of Cormack et al. (2009), used everywhere RRF is


@dataclass(slots=True)
class Windows:
    """Every conversation window of one index: texts, vectors (unit rows), BM25 statistics."""

    texts: list[str]
    matrix: np.ndarray
    tf: list[Counter[str]]
    df: Counter[str]
    lengths: np.ndarray

    @classmethod
    def of(cls, index: MemoryIndex) -> Windows:
        emb = index.embedder
        assert emb is not None
        rows = index.conn().execute(
            "SELECT c.text, v.vec FROM chunks c JOIN vectors v ON v.hash = c.hash "
            "AND v.provider = ? AND v.model = ? WHERE c.source = 'session' ORDER BY c.id",
            (emb.provider, emb.model)).fetchall()
        texts = [r[0] for r in rows]
        matrix = np.vstack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
        tf = [Counter(w.casefold() for w in _WORD.findall(t)) for t in texts]
        df: Counter[str] = Counter()
        for counts in tf:
            df.update(counts.keys())
        return cls(texts, matrix, tf, df, np.array([sum(c.values()) for c in tf], dtype=float))

    def bm25(self, query: str, k1: float = 1.2, b: float = 0.75) -> list[int]:
        """Okapi BM25 (Robertson–Zaragoza IDF), query words as the index's keyword side
        takes them (stop words dropped); window indices, best first."""
        n, avg = len(self.texts), float(self.lengths.mean())
        scores = np.zeros(n)
        for term in query_terms(query):
            df = self.df.get(term, 0)
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for i, counts in enumerate(self.tf):
                f = counts.get(term, 0)
                if f:
                    scores[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * self.lengths[i] / avg))
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order if scores[i] > 0]

    def dense(self, qvec: np.ndarray) -> list[int]:
        return [int(i) for i in np.argsort(-(self.matrix @ qvec), kind="stable")]


def rrf(*rankings: list[int]) -> list[int]:
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, i in enumerate(ranking):
            fused[i] = fused.get(i, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(fused, key=lambda i: -fused[i])
