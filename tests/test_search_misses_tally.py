"""The recall bench's miss tally (bench/_recall_misses.py) on hand-made rankings: it must put
each missed evidence turn in the right place, or the analysis it prints misleads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "bench" / "_recall_misses.py"
_SPEC = importlib.util.spec_from_file_location("recall_misses", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
misses = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("recall_misses", misses)  # dataclasses look their module up
_SPEC.loader.exec_module(misses)

# Windows 0..59; window i holds "turn i" and sits in session "s<i // 10>".
TEXTS = [f"date\nuser: A: turn {i}.\nassistant: B: reply {i}." for i in range(60)]
SESSIONS = [f"s{i // 10}" for i in range(60)]


def _tally(evidence: list[str], lucid: list[int], bm25: list[int], dense: list[int]):
    tally = misses.Misses()
    tally.add("multi-hop", evidence, [TEXTS[i] for i in lucid], [SESSIONS[i] for i in lucid],
              TEXTS, SESSIONS, bm25, dense)
    return tally


def test_a_turn_in_the_top_10_is_no_miss_and_the_rest_are_placed_by_rank() -> None:
    # Window 15 (session s1) is in the top 10, window 12 (s1 too) is not; 50..59 are past 50.
    lucid = [*range(9), 15, *range(9, 15), *range(16, 50)]
    tally = _tally(["turn 3.", "turn 12.", "turn 55."], lucid, bm25=list(range(50)), dense=[55, *range(50)])
    b = tally.buckets["multi-hop"]
    assert tally.evidence["multi-hop"] == 3 and b["missed"] == 2
    assert b["lucid rank 11-50"] == 1 and b["not in lucid's 50"] == 1
    assert b["BM25 top 50"] == 1  # turn 12 only: turn 55 is past BM25's 50
    assert b["dense top 50"] == 2
    assert b["in no top 50"] == 0  # dense has turn 55
    assert b["session already in top 10"] == 1  # s1 (window 12) is; s5 (window 55) is not


def test_a_turn_no_ranking_reaches_counts_as_needing_other_candidates() -> None:
    tally = _tally(["turn 59."], list(range(50)), bm25=list(range(50)), dense=list(range(50)))
    b = tally.buckets["multi-hop"]
    assert b["in no top 50"] == 1 and b["session already in top 10"] == 0


def test_windows_holding_a_questions_evidence_are_counted_once_each() -> None:
    both_in_one = "date\nuser: A: first.\nassistant: B: second."
    tally = misses.Misses()
    tally.add("open-domain", ["A: first.", "B: second."], [both_in_one], ["s0"], [both_in_one], ["s0"],
              [0], [0])
    assert tally.windows["open-domain"] == {1: 1}
    assert tally.buckets["open-domain"]["missed"] == 0
    assert "| open-domain | 1 | 2 (2×1) | 1×1 |" in "\n".join(tally.lines("per-conversation"))
