"""The hybrid ranking rules of issue 28, each on a small synthetic case: scale-free fusion,
the group lift, near-duplicates only, time (periods, "when", undated files), and a
conversation's later exchange not being pushed out by its first."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import numpy as np

from lucidgate.memory.search import MemoryIndex, SearchSettings, search
from lucidgate.memory.search.rank import Candidate, fuse, merge, mmr, time_factors
from tests.search_kit import transcript

TODAY = date(2026, 11, 26)


def _fused(cands: list[Candidate]) -> list[int]:
    fuse(cands, vector_weight=0.6, text_weight=0.4, baseline=0.78, vectors_on=True)
    return [c.chunk_id for c in sorted(cands, key=lambda c: -c.score)]


def test_order_does_not_depend_on_the_scale_of_bm25() -> None:
    """Raw BM25 grows with query length and corpus; the fused order must not."""
    def cands(scale: float) -> list[Candidate]:
        return [Candidate(1, "", None, bm25=2.0 * scale, cosine=0.80),
                Candidate(2, "", None, bm25=1.0 * scale, cosine=0.86),
                Candidate(3, "", None, bm25=None, cosine=0.84)]

    assert _fused(cands(1.0)) == _fused(cands(40.0)) == [2, 1, 3]


def test_a_word_match_found_by_keywords_is_judged_on_its_meaning_too() -> None:
    """Missing cosine is no evidence: a keyword-only candidate loses nothing for it, but one
    whose meaning is also close beats a bare word match."""
    strong = Candidate(1, "", None, bm25=5.0, cosine=0.86)
    bare = Candidate(2, "", None, bm25=5.0, cosine=0.78)
    assert _fused([bare, strong]) == [1, 2]


def test_a_chunk_beside_the_best_match_is_lifted_above_an_equal_stray_one() -> None:
    best = Candidate(1, "", None, bm25=4.0, cosine=0.88, group=("sessions/a.jsonl", "web:a", "2023-05-08"))
    same_day = Candidate(2, "", None, bm25=2.0, cosine=0.83, group=("sessions/a.jsonl", "web:a", "2023-05-08"))
    stray = Candidate(3, "", None, bm25=2.0, cosine=0.83, group=("sessions/b.jsonl", "web:b", "2023-06-01"))
    assert _fused([stray, same_day, best]) == [1, 2, 3]
    assert best.score <= 1.0  # still an absolute score: the best keeps its own strength


def test_two_different_exchanges_of_one_chat_both_stay_but_a_copy_does_not() -> None:
    base = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    related = np.array([0.9, 0.436, 0.0], dtype=np.float32)  # cosine 0.9: same chat, other words
    first = Candidate(1, "a", None, score=0.9, vector=base)
    copy = Candidate(2, "a", None, score=0.89, vector=base.copy())
    second = Candidate(3, "b", None, score=0.85, vector=related / np.linalg.norm(related))
    picked = [c.chunk_id for c in mmr([first, copy, second], 2, 0.7, baseline=0.78)]
    assert picked == [1, 3]  # the copy is skipped, the related exchange is not penalised


def test_a_named_period_wins_over_recency() -> None:
    may = Candidate(1, "", "2026-05-10", score=0.5)
    recent = Candidate(2, "", "2026-11-20", score=0.5)
    time_factors([may, recent], query="what did we plan in May", today=TODAY,
                 period=(date(2026, 5, 1), date(2026, 5, 31)), half_life_days=30, floor=0.5)
    assert may.score > recent.score


def test_asking_when_turns_recency_off() -> None:
    old = Candidate(1, "", "2023-05-08", score=0.5)
    new = Candidate(2, "", "2026-11-20", score=0.5)
    time_factors([old, new], query="When did Caroline go to the support group?", today=TODAY,
                 period=None, half_life_days=30, floor=0.5)
    assert old.score == new.score == 0.5
    merge([a := Candidate(1, "", "2023-05-08", bm25=3.0), b := Candidate(2, "", "2026-11-20", bm25=3.0)],
          vector_weight=0.6, text_weight=0.4, baseline=0.78, vectors_on=False, today=TODAY,
          half_life_days=30, query="support group")
    assert b.score > a.score  # without "when", recency breaks the tie


def _chat(ws: Path, key: str, day: str, pairs: list[tuple[str, str]]) -> None:
    (ws / "sessions").mkdir(exist_ok=True)
    messages = [m for pair in pairs for m in (("user", pair[0]), ("assistant", pair[1]))]
    (ws / "sessions" / f"{key.replace(':', '_')}.jsonl").write_text(
        transcript(key, messages, stamp=f"{day}T10:00:00+00:00"), encoding="utf-8")


def test_a_month_in_the_query_finds_that_months_chat_first(tmp_path: Path) -> None:
    _chat(tmp_path, "web:may", "2026-05-12", [("We went to the harbour market.", "Sounds lovely."),
                                              ("Bought fresh sardines there.", "Great.")])
    _chat(tmp_path, "web:oct", "2026-10-03", [("We went to the harbour market again.", "Nice."),
                                              ("Bought sardines again.", "Good.")])
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    hits = search(idx, "harbour market sardines", k=2, today=TODAY)
    assert hits[0].session_key == "web:oct"  # recency breaks the tie when no time is named
    hits = search(idx, "what did we buy at the harbour market in May", k=2, today=TODAY)
    assert hits[0].session_key == "web:may" and hits[0].text.startswith("Tue 12 May 2026 10:00 UTC")


def test_a_later_exchange_of_the_same_chat_is_not_crowded_out(tmp_path: Path) -> None:
    """Two windows of one conversation that share words are not near-duplicates."""
    pairs = [("Planning the garden: tomatoes on the left bed.", "Good spot, lots of sun."),
             ("And the basil?", "Next to the tomatoes."),
             ("Garden update: the tomatoes need stakes now.", "Bamboo stakes work well."),
             ("Ok.", "Anything else?")]
    _chat(tmp_path, "web:g", "2026-11-01", pairs)
    for n in range(6):
        _chat(tmp_path, f"web:x{n}", "2026-11-02", [(f"Garden centre opening hours {n}?", "9 to 5."),
                                                    ("Thanks.", "Welcome.")])
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    hits = search(idx, "garden tomatoes stakes", k=3, today=TODAY, settings=SearchSettings())
    texts = "\n".join(h.text for h in hits)
    assert "left bed" in texts and "need stakes" in texts, [h.text[:60] for h in hits]


def test_undated_memory_files_are_not_decayed(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "MEMORY.md").write_text("# Memory\n\n- Dentist: Dr. Silva in Lisbon.\n")
    (tmp_path / "memory" / "history.jsonl").write_text(json.dumps(
        {"cursor": 1, "timestamp": "2025-01-05 09:00", "content": "- Dentist: Dr. Silva called.",
         "session_key": "web:a"}) + "\n")
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    hits = search(idx, "dentist Silva", k=2, today=TODAY)
    assert hits[0].source == "memory" and hits[1].text.startswith("Sun 5 Jan 2025 09:00\n")
