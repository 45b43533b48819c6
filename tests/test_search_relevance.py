"""Relevance with the real bundled embedder: keyword and paraphrase queries, English and
Chinese, over notes, history entries and transcripts; the right chunk ranks in the top 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucidgate.memory.search import MemoryIndex, search
from tests.search_kit import e5, write_corpus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> MemoryIndex:
    ws = tmp_path_factory.mktemp("corpus")
    write_corpus(ws)
    idx = MemoryIndex(ws, embedder=e5())
    idx.sync()
    assert idx.status()["vectors_on"] and idx.status()["embedded"] == idx.status()["chunks"]
    return idx


KEYWORD = [
    ("Volvo", "Volvo XC40"),
    ("小米", "我的猫叫小米"),
    ("penicillin", "Allergic to penicillin"),
    ("Clara birthday", "Clara's birthday"),
    ("钢琴", "钢琴比赛"),
    ("Hugo", "WordPress to Hugo"),
]

PARAPHRASE = [
    ("what vehicle do I drive?", "Volvo XC40"),
    ("am I allergic to any medicine", "Allergic to penicillin"),
    ("when is my sister's birthday", "Clara's birthday"),
    ("我上次说的那个餐厅叫什么", "川味小馆"),
    ("宠物叫什么名字", "我的猫叫小米"),
    ("我女儿的比赛在哪个城市", "钢琴比赛"),
    ("which static site generator will the blog use", "WordPress to Hugo"),
    ("what is my job", "sound engineer"),
    ("牙科预约是哪天", "看牙医"),
]


@pytest.mark.parametrize(("query", "expected"), KEYWORD + PARAPHRASE)
def test_right_chunk_in_top_three(index: MemoryIndex, query: str, expected: str) -> None:
    hits = search(index, query, k=3)
    assert any(expected in h.text for h in hits), [h.snippet[:60] for h in hits]


def test_keyword_only_still_finds_words(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    for query, expected in KEYWORD:
        hits = search(idx, query, k=3)
        assert any(expected in h.text for h in hits), (query, [h.snippet[:60] for h in hits])
    assert idx.status()["embedder"].startswith("keyword-only")
