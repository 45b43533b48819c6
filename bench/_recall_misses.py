"""Where the evidence lucid's top 10 misses is: ``bench_recall_quality.py --misses``.

For every evidence turn of a question that is not within the top ``K`` hits (by rank; the
reading budget is the recall table's business), this records how far down it is — in
lucid's own ranking of ``DEPTH`` hits, in BM25's and in plain cosine ranking over the same
windows — and whether its conversation session is one the top ``K`` already holds. That
separates what a better *ordering* of today's candidates could fix (evidence ranked
K+1..DEPTH) from what needs other candidates (outside the first DEPTH of every ranking: the
turn says it in other words), and tells whether spreading the top K over more sessions could
reach it. Per category it also counts how many windows hold a question's evidence: whether
the K slots themselves limit recall.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from lucidgate.memory.search.index import MemoryIndex

DEPTH = 50
K = 10


@dataclass(slots=True)
class Misses:
    """Counts per category (``CATEGORIES`` names)."""

    questions: Counter[str] = field(default_factory=Counter)
    evidence: Counter[str] = field(default_factory=Counter)
    per_question: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    windows: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    buckets: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, category: str, evidence: Sequence[str], lucid: Sequence[str],
            lucid_sessions: Sequence[str | None], texts: Sequence[str], sessions: Sequence[str | None],
            bm25: Sequence[int], dense: Sequence[int]) -> None:
        """One question: ``lucid`` are its hit texts (best first, up to DEPTH) and their
        sessions; ``texts``/``sessions`` every window of the index with ``bm25``/``dense``
        the baselines' orders over them."""
        self.questions[category] += 1
        self.per_question[category][len(evidence)] += 1
        top_sessions = set(lucid_sessions[:K])
        holders = {next((i for i, t in enumerate(texts) if turn in t), None) for turn in evidence}
        self.windows[category][len(holders - {None})] += 1
        bm25_rank = {w: r for r, w in enumerate(bm25[:DEPTH])}
        dense_rank = {w: r for r, w in enumerate(dense[:DEPTH])}
        for turn in evidence:
            self.evidence[category] += 1
            rank = next((r for r, t in enumerate(lucid) if turn in t), None)
            if rank is not None and rank < K:
                continue
            b = self.buckets[category]
            b["missed"] += 1
            b[f"lucid rank {K + 1}-{DEPTH}" if rank is not None else f"not in lucid's {DEPTH}"] += 1
            window = next((i for i, t in enumerate(texts) if turn in t), None)
            if window is None:
                b["in no window"] += 1
                continue
            b[f"BM25 top {DEPTH}"] += window in bm25_rank
            b[f"dense top {DEPTH}"] += window in dense_rank
            b[f"in no top {DEPTH}"] += rank is None and window not in bm25_rank and window not in dense_rank
            b[f"session already in top {K}"] += sessions[window] in top_sessions

    def lines(self, title: str) -> list[str]:
        cols = ["missed", f"lucid rank {K + 1}-{DEPTH}", f"not in lucid's {DEPTH}", f"BM25 top {DEPTH}",
                f"dense top {DEPTH}", f"in no top {DEPTH}", f"session already in top {K}"]
        out = [f"{title}: evidence turns missed by lucid's top {K}, and where they are",
               "| category | questions | evidence turns (turns×questions) | windows holding them "
               "(windows×questions) | "
               + " | ".join(cols) + " |", "|---" * (len(cols) + 4) + "|"]
        for cat in sorted(self.questions):
            dist = " ".join(f"{n}×{q}" for n, q in sorted(self.per_question[cat].items()))
            wins = " ".join(f"{n}×{q}" for n, q in sorted(self.windows[cat].items()))
            out.append(f"| {cat} | {self.questions[cat]} | {self.evidence[cat]} ({dist}) | {wins} | "
                       + " | ".join(str(self.buckets[cat][c]) for c in cols) + " |")
        return out


def window_sessions(index: MemoryIndex) -> list[str | None]:
    """The session key of every window, in the order ``_baselines.Windows.of`` lists them."""
    emb = index.embedder
    assert emb is not None
    return [r[0] for r in index.conn().execute(
        "SELECT c.session_key FROM chunks c JOIN vectors v ON v.hash = c.hash "
        "AND v.provider = ? AND v.model = ? WHERE c.source = 'session' ORDER BY c.id",
        (emb.provider, emb.model))]
