"""Time in recall: the date line a chunk carries, and what a query says about time.

A conversation window or a history entry is indexed with a first line saying when it was
said (``Mon 8 May 2023 13:56 UTC``): the words ("May", "2023", "Mon") are then searchable
like any other, the embedder sees them, and whoever reads a hit can answer "when?" from
it. Stamps are stored in UTC, so the line says UTC rather than guess the user's zone.

``query_time`` reads what a query says about time, as rules that hold for anyone's memory
(English in ``when_en``, Chinese in ``when_zh``, the calendar in ``when_days``; a query
mixing both languages is read by both):

- **a period** it names ("in May", "last week", "上周二", "at Christmas", "last summer") as an
  inclusive date range, which the ranking uses to favour chunks from then;
- **before / after / since / until** a time ("before May 2023", "2023年5月之后") as an
  open range; before or after an *event* ("after the move") as an ``anchor`` phrase that the
  search looks up first (the event's date is found in memory, not in a calendar);
- **the first time / earliest** or **the last time / most recently** as an ``order``: among
  the strong matches the earliest (or latest) is what is asked for, so time counts from
  *that* match, not from today;
- **when / what date / the second time / 什么时候** as ``asks_when``: the answer is as
  likely old as new, so no recency bias.

An unrecognised phrase just leaves ranking as it was: every rule only ever prefers, never
filters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from lucidgate.memory.search.fts_text import CJK_RUN
from lucidgate.memory.search.when_en import english_period
from lucidgate.memory.search.when_zh import chinese_period

__all__ = ["Period", "TimeIntent", "named_period", "query_period", "query_time", "stamp_line",
           "without_stamp"]

Period = tuple[date, date]  # inclusive


@dataclass(frozen=True, slots=True)
class TimeIntent:
    """What a query says about time (see the module docstring); all empty for most queries."""

    period: Period | None = None
    order: str | None = None  # "first" | "last"
    asks_when: bool = False
    # ("before" | "after", the event's words). The words stay in the query too: what was
    # said at the event itself is often the answer ("how did she feel after the accident").
    anchor: tuple[str, str] | None = None


def stamp_line(first: str, last: str = "") -> str | None:
    """``Mon 8 May 2023 13:56 UTC`` for an ISO timestamp (``… – Tue 9 May 2023`` when the
    chunk runs into another day); None when ``first`` is not a timestamp."""
    start = _parse(first)
    if start is None:
        return None
    line = f"{_day(start)} {start:%H:%M}" + (" UTC" if start.tzinfo is not None else "")
    end = _parse(last) if last else None
    if end is not None and end.date() != start.date():
        line += f" – {_day(end)}"
    return line


_STAMP_LINE = re.compile(r"^[A-Z][a-z]{2} \d{1,2} [A-Z][a-z]{2} \d{4} \d\d:\d\d(?: UTC)?"
                         r"(?: – [A-Z][a-z]{2} \d{1,2} [A-Z][a-z]{2} \d{4})?\n")


def without_stamp(text: str) -> str:
    """``text`` without its leading date line (e.g. to find a hit's lines in a prompt, where
    the date line never appears)."""
    return _STAMP_LINE.sub("", text, count=1)


def _parse(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None


def _day(when: datetime) -> str:
    return f"{when:%a} {when.day} {when:%b %Y}"


_ASKS_WHEN = re.compile(r"\bwhen\b|\bwhat (?:date|day|time|year|month)\b|\bhow long ago\b|"
                        r"\b(?:second|third|fourth|fifth|\d+(?:st|nd|rd|th)) time\b|"
                        r"什么时候|哪天|哪一天|几号|几月|何时|多久以前|第[二三四五六七八九十\d]+次", re.I)
_FIRST = re.compile(r"\b(?:the )?first time\b|\bfor the first time\b|\bearliest\b|\bfirst ever\b|"
                    r"\boriginally\b|第一次|首次|最早|最初", re.I)
_LAST = re.compile(r"\b(?:the )?last time\b|\bmost recent(?:ly)?\b|\blatest\b|\brecently\b|"
                   r"\blately\b|上次|上一次|最近|最后一次", re.I)
_EDGE_EN = re.compile(r"(?<!day )\b(before|after|since|until|prior to)\s+(.+?)(?:[?.!;]|,(?!\s*\d)|$)", re.I)
# "the week before <date>", "two weeks after <date>": a span counted from the stated date.
_SPAN_HEAD = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six|the|last)\s+"
                        r"(day|week|weekend|month|year)s?\s*$", re.I)
_SPAN_DAYS = {"day": 1, "week": 7, "weekend": 7, "month": 30, "year": 365}
_SPAN_COUNT = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_EDGE_ZH = re.compile(r"(.{1,20}?)(之前|以前|之后|以后)")
_EDGE_KIND = {"before": "before", "prior to": "before", "until": "before", "after": "after",
              "since": "after", "之前": "before", "以前": "before", "之后": "after", "以后": "after"}


def named_period(text: str, today: date) -> Period | None:
    """The period ``text`` names in either language (English rules first)."""
    return english_period(text, today) or chinese_period(text, today)


def query_period(query: str, today: date) -> Period | None:
    """The period ``query`` names, if any (relative phrases count back from ``today``)."""
    return query_time(query, today).period


def query_time(query: str, today: date) -> TimeIntent:
    """Everything ``query`` says about time (see the module docstring)."""
    order = "first" if _FIRST.search(query) else "last" if _LAST.search(query) else None
    asks_when = bool(_ASKS_WHEN.search(query))
    edge = _edge(query)
    if edge is not None:
        kind, rest, head = edge
        inner = named_period(rest, today)
        if inner is not None:
            return TimeIntent(_beside(kind, inner, head), order, asks_when)
        words = rest.strip()
        if len(words) >= (2 if CJK_RUN.search(words) else 3):
            return TimeIntent(None, order, asks_when, (kind, words))
    return TimeIntent(named_period(query, today), order, asks_when)


def _beside(kind: str, inner: Period, head: str) -> Period:
    """The period before or after ``inner``: open-ended, or a span counted from it when the
    words before the clause give one ("the week before …", "two weeks after …")."""
    span = _SPAN_HEAD.search(head)
    if span is None:
        return (date.min, inner[0] - timedelta(days=1)) if kind == "before" else \
            (inner[1] + timedelta(days=1), date.max)
    word = span[1].casefold()
    n = int(word) if word.isdigit() else _SPAN_COUNT.get(word, 1)
    unit = _SPAN_DAYS[span[2].casefold()]
    if n == 1:
        return (inner[0] - timedelta(days=unit), inner[0] - timedelta(days=1)) if kind == "before" \
            else (inner[1] + timedelta(days=1), inner[1] + timedelta(days=unit))
    centre = inner[0] - timedelta(days=n * unit) if kind == "before" else inner[1] + timedelta(days=n * unit)
    return centre - timedelta(days=unit), centre + timedelta(days=unit)


def _edge(query: str) -> tuple[str, str, str] | None:
    """("before" | "after", what follows the word, what precedes it) for "before X" /
    "X之前" phrasings."""
    m = _EDGE_EN.search(query)
    if m:
        return _EDGE_KIND[m[1].casefold()], m[2], query[:m.start()]
    m = _EDGE_ZH.search(query)
    if m:
        return _EDGE_KIND[m[2]], m[1].lstrip("在从于"), query[:m.start()]
    return None
