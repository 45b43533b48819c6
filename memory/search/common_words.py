"""Words too common to rank by: left out of the keyword query once memory is large.

The keyword side OR-s a query's words and FTS5 scores every chunk that holds any of them
before the best are taken. A word found in a large share of memory ("doing", "how",
"feeling" — or a name in nearly every window of one chat) ranks almost nothing (its BM25
weight, the IDF, is a fraction of a rare word's) yet makes FTS5 score most of the index: in
a memory of years that is nearly every chunk, for every search. So, as with stop words, a
word in more than ``COMMON_SHARE`` of the chunks is left out of the MATCH expression —
while rarer words remain to rank by; a query made only of common words keeps its
``KEEP_RAREST`` rarest. The vector side still reads the whole query. Small memories (below
``MIN_CHUNKS``) are untouched: there every match is cheap.

A share alone does not bound the work: at 100k windows a word in 9% of them still matches
9,000 chunks, and a question of four such words made FTS5 score 20,000 rows (about 5 µs
each, 100 ms on a busy core) for a top 50. So the words also share a budget of
``SCORED_ROWS`` matches, spent rarest first: a word joins the query only while the
matches of the words kept so far plus its own stay within it (the rarest word always
joins). What is left out is the weakest evidence the query has: the words memory holds
most often, whose IDF is the lowest of the query's, and whose matches the rarer words'
matches outrank anyway (a top 50 out of thousands is made of chunks that hold the rare
words). Ranking by BM25 stays exact within what is kept.

How many chunks hold a word is counted once per word (one doclist read) and remembered per
index until the chunk count moves by a tenth, which costs a few milliseconds per new
common word and nothing afterwards.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from typing import Any

from lucidgate.memory.search.fts_text import query_terms

__all__ = ["COMMON_SHARE", "SCORED_ROWS", "selective_query"]

COMMON_SHARE = 0.1
SCORED_ROWS = 6_000
KEEP_RAREST = 2
MIN_CHUNKS = 5_000
_MAX_TERMS = 32


class _Counts:
    def __init__(self) -> None:
        self.total = 0
        self.df: dict[str, int] = {}
        self.lock = threading.Lock()


_COUNTS: weakref.WeakKeyDictionary[Any, _Counts] = weakref.WeakKeyDictionary()


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def selective_query(owner: Any, conn: sqlite3.Connection, query: str) -> str | None:
    """The FTS5 MATCH expression for ``query`` without its too-common words (see the module
    docstring); None when the query has no searchable word. ``owner`` (the index) keys the
    remembered counts."""
    terms = query_terms(query)[:_MAX_TERMS]
    if not terms:
        return None
    counts = _COUNTS.setdefault(owner, _Counts())
    total = conn.execute("SELECT max(rowid) FROM chunks_fts").fetchone()[0] or 0
    if total < MIN_CHUNKS:
        return " OR ".join(map(_quoted, terms))
    with counts.lock:
        if abs(total - counts.total) > counts.total / 10:
            counts.total, counts.df = total, {}
        for t in terms:
            if t not in counts.df:
                counts.df[t] = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                            (_quoted(t),)).fetchone()[0]
        df = {t: counts.df[t] for t in terms}
    found = [t for t in terms if df[t]]
    if not found:
        return " OR ".join(map(_quoted, terms))  # matches nothing either way
    kept = [t for t in found if df[t] <= COMMON_SHARE * total] or \
        sorted(found, key=lambda t: df[t])[:KEEP_RAREST]
    return " OR ".join(map(_quoted, _within_budget(kept, df)))


def _within_budget(terms: list[str], df: dict[str, int]) -> list[str]:
    """``terms`` (in query order) whose matches, counted rarest first, fit ``SCORED_ROWS``;
    the rarest always stays."""
    chosen: set[str] = set()
    spent = 0
    for t in sorted(terms, key=lambda t: df[t]):
        if chosen and spent + df[t] > SCORED_ROWS:
            break
        chosen.add(t)
        spent += df[t]
    return [t for t in terms if t in chosen]
