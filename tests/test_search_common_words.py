"""Issue 42, scale: words in a large share of memory leave the keyword query (they rank
nothing and make FTS5 score most of the index), rarer words stay; small memories untouched."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from lucidgate.memory.search import MemoryIndex, search
from lucidgate.memory.search import common_words
from lucidgate.memory.search.common_words import selective_query

TODAY = date(2026, 11, 26)


def _memory(ws: Path) -> MemoryIndex:
    notes = ws / "memory"
    notes.mkdir(parents=True)
    lines = [f"# Day {n}\n\nWhat I was doing today: tidying drawer {n}.\n" for n in range(30)]
    lines[7] = "# Day 7\n\nWhat I was doing today: training for the marathon in Porto.\n"
    for n, text in enumerate(lines):
        (notes / f"2026-01-{n + 1:02d}.md").write_text(text, encoding="utf-8")
    index = MemoryIndex(ws, embedder=None)
    index.sync()
    return index


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat the small hand-made memory as a large one."""
    monkeypatch.setattr(common_words, "MIN_CHUNKS", 0)


def test_a_word_in_most_chunks_leaves_the_query_while_rarer_ones_stay(tmp_path: Path, large: None) -> None:
    index = _memory(tmp_path)
    expr = selective_query(index, index.conn(), "what was I doing for the marathon")
    assert expr == '"marathon"'
    hits = search(index, "what was I doing for the marathon", k=3, today=TODAY)
    assert "marathon in Porto" in hits[0].text
    index.close()


def test_a_query_of_common_words_only_keeps_its_rarest(tmp_path: Path, large: None) -> None:
    index = _memory(tmp_path)
    expr = selective_query(index, index.conn(), "doing today tidying")
    assert expr is not None and expr.count('"') == 2 * common_words.KEEP_RAREST
    assert search(index, "doing today tidying", k=2, today=TODAY)  # still finds something
    index.close()


def test_a_small_memory_keeps_every_word(tmp_path: Path) -> None:
    index = _memory(tmp_path)
    expr = selective_query(index, index.conn(), "what was I doing for the marathon")
    assert expr == '"doing" OR "marathon"'
    index.close()


def test_words_share_a_budget_of_scored_matches_spent_rarest_first(
        tmp_path: Path, large: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 100k windows four words each in a few percent of memory still made FTS5 score 20,000
    rows: the words kept are the rarest whose matches fit ``SCORED_ROWS`` together."""
    notes = tmp_path / "memory"
    notes.mkdir(parents=True)
    for n in range(40):
        text = "walked the dog" + (" to the harbour" if n % 10 == 0 else "") + \
            (" and saw the lighthouse" if n == 5 else "")
        (notes / f"2026-02-{n % 28 + 1:02d}-{n}.md").write_text(f"# Walk {n}\n\n{text}.\n", encoding="utf-8")
    index = MemoryIndex(tmp_path, embedder=None)
    index.sync()
    # "harbour" is in 4 of 40 notes, "lighthouse" in 1; "walked" and "dog" in all (left out by share).
    monkeypatch.setattr(common_words, "SCORED_ROWS", 5)
    assert selective_query(index, index.conn(), "harbour lighthouse") == '"harbour" OR "lighthouse"'
    monkeypatch.setattr(common_words, "SCORED_ROWS", 4)
    assert selective_query(index, index.conn(), "harbour lighthouse") == '"lighthouse"'
    monkeypatch.setattr(common_words, "SCORED_ROWS", 0)  # the rarest word always stays
    assert selective_query(index, index.conn(), "walked to the harbour") == '"harbour"'
    hits = search(index, "harbour lighthouse", k=1, today=TODAY)
    assert "lighthouse" in hits[0].text
    index.close()
