"""Hybrid ranking rules: weights, temporal decay (evergreen files exempt), MMR diversity —
on plain values and through a real index."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np

from lucidgate.memory.search import MemoryIndex, SearchSettings, search
from lucidgate.memory.search.rank import Candidate, decay_factor, merge, mmr

TODAY = date(2026, 11, 23)


def test_decay_halves_towards_the_floor_and_spares_undated() -> None:
    assert decay_factor(None, TODAY, 30) == 1.0
    assert decay_factor("2026-11-23", TODAY, 30) == 1.0
    assert abs(decay_factor("2026-10-24", TODAY, 30, floor=0.0) - 0.5) < 1e-9
    assert abs(decay_factor("2026-10-24", TODAY, 30, floor=0.5) - 0.75) < 1e-9
    assert decay_factor("2020-01-01", TODAY, 30, floor=0.5) >= 0.5
    assert decay_factor("not a date", TODAY, 30) == 1.0


def test_merge_weights_and_keyword_only_renormalise() -> None:
    a = Candidate(1, "a", None, bm25=3.0, cosine=0.78)  # keyword only (cosine at baseline)
    b = Candidate(2, "b", None, bm25=None, cosine=1.0)  # vector only
    merge([a, b], vector_weight=0.7, text_weight=0.3, baseline=0.78, vectors_on=True,
          today=TODAY, half_life_days=30)
    assert a.parts["keyword"] == 1.0 and b.parts["vector"] == 1.0
    assert b.score > a.score  # meaning weighs more, and b is the query's best match by meaning
    assert abs(b.score - 0.7) < 1e-6  # the best candidate keeps its absolute strength
    merge([a], vector_weight=0.7, text_weight=0.3, baseline=0.78, vectors_on=False,
          today=TODAY, half_life_days=30)
    assert abs(a.score - 0.75) < 1e-6  # keyword-only: the keyword side carries the whole score


def test_mmr_skips_near_duplicates() -> None:
    v = np.array([1.0, 0.0], dtype=np.float32)
    w = np.array([0.0, 1.0], dtype=np.float32)
    cands = [Candidate(i, f"same {i}", None, score=0.9 - i * 0.01, vector=v) for i in range(5)]
    cands.append(Candidate(9, "different", None, score=0.6, vector=w))
    assert [c.chunk_id for c in mmr(cands, 2, 1.0)] == [0, 1]  # λ=1: plain order
    assert [c.chunk_id for c in mmr(cands, 2, 0.7)] == [0, 9]  # diversity wins the 2nd slot


def test_mmr_and_decay_through_the_index(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    for day in ("2026-11-20", "2026-11-21", "2026-11-22"):
        (memory / f"{day}.md").write_text(f"# {day}\n\n- Dentist appointment moved to Friday morning.\n")
    (memory / "2025-01-05.md").write_text("# 2025-01-05\n\n- Dentist appointment cancelled.\n")
    (memory / "MEMORY.md").write_text("# Memory\n\n- Dentist: Dr. Silva in Lisbon.\n")
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    plain = search(idx, "dentist appointment", k=5, today=TODAY,
                   settings=SearchSettings(mmr_lambda=1.0))
    dates = [h.date for h in plain]
    # newer notes outrank the old one with the same words; the evergreen file is not decayed
    assert dates.index("2026-11-22") < dates.index("2025-01-05")
    diverse = search(idx, "dentist appointment", k=3, today=TODAY,
                     settings=SearchSettings(mmr_lambda=0.3))
    moved = [h for h in diverse if "moved to Friday" in h.text]
    assert len(moved) < 3  # three identical lines do not fill the results
