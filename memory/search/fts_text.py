"""Text as FTS5 sees it: CJK made searchable by bigrams, queries that are never syntax.

FTS5's ``unicode61`` tokenizer keeps a run of Chinese or Japanese characters as one token,
so ``小米`` would never match ``我的猫叫小米``; the trigram tokenizer needs three
characters. We rewrite every CJK run, at index and at query time, into its overlapping
character bigrams plus its single characters (the classic CJK analyzer): a two-character
query matches wherever those two characters are adjacent, with no dictionary to load and
no segmentation disagreement between document and query.

Queries are never passed through as FTS5 syntax: they are split into words, each word is
double-quoted (quotes doubled), and the words are OR-ed so BM25 ranks the chunks matching
most of them first. ``"*():-^`` typed by a user are therefore just characters.
"""

from __future__ import annotations

import re

__all__ = ["CJK_RUN", "fts_query", "fts_text", "query_terms"]

# A run of kana, hangul or CJK ideographs (one regex for the whole package: compiling these
# ranges costs ~6 ms, paid once per process).
CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_WORD = re.compile(r"\w+")
# Very common English words add nothing to a BM25 OR-query but cost time on 10k chunks.
_STOP = frozenset(
    "a an and are as at be by did do does for from had has have i in is it me my of on or "
    "our she he so that the their them they this to was we were what when where which who "
    "why will with you your about tell said say".split()
)


def _cjk_tokens(run: str, *, unigrams: bool) -> list[str]:
    if len(run) == 1:
        return [run]
    bigrams = [run[i:i + 2] for i in range(len(run) - 1)]
    return bigrams + list(run) if unigrams else bigrams


def fts_text(text: str) -> str:
    """The text stored in the FTS column: CJK runs replaced by bigrams and unigrams."""
    return CJK_RUN.sub(lambda m: " " + " ".join(_cjk_tokens(m.group(), unigrams=True)) + " ", text)


def query_terms(query: str) -> list[str]:
    """The distinct search terms of a user query, in order (CJK as bigrams)."""
    terms: list[str] = []
    pos = 0
    for match in CJK_RUN.finditer(query):
        terms.extend(w.casefold() for w in _WORD.findall(query[pos:match.start()]))
        terms.extend(_cjk_tokens(match.group(), unigrams=False))
        pos = match.end()
    terms.extend(w.casefold() for w in _WORD.findall(query[pos:]))
    # Stop words and stray letters ("what's" -> "s") match nearly everything.
    meaningful = [t for t in terms
                  if t not in _STOP and (len(t) > 1 or t.isdigit() or not t.isascii())] or terms
    return list(dict.fromkeys(meaningful))


def fts_query(query: str) -> str | None:
    """A safe FTS5 MATCH expression, or None when the query has no searchable word."""
    terms = query_terms(query)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms[:32])
