"""Time in recall: the date line a chunk carries, and the period a query names.

A conversation window or a history entry is indexed with a first line saying when it was
said (``Mon 8 May 2023 13:56 UTC``): the words ("May", "2023", "Mon") are then searchable
like any other, the embedder sees them, and whoever reads a hit can answer "when?" from
it. Stamps are stored in UTC, so the line says UTC rather than guess the user's zone.

``query_period`` reads the time a query names — a month ("in May", "May 2023"), a year,
an ISO date, "yesterday", "last week", "N days ago" … — as an inclusive date range, which
the ranking uses to favour chunks from then (``rank.period_factor``). It is deliberately
small and English-only: an unrecognised phrase just leaves ranking as it was.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

__all__ = ["Period", "query_period", "stamp_line", "without_stamp"]

Period = tuple[date, date]  # inclusive

_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december"]
_MONTH_ALT = "|".join([m for m in _MONTHS] + [m[:3] for m in _MONTHS if m != "may"] + ["sept"])
_MONTH = re.compile(rf"\b(?:in|during|of|since|by|early|late|mid|last|this|next)?\s*"
                    rf"({_MONTH_ALT})\b\.?(?:\s*,?\s*((?:19|20)\d\d))?", re.I)
_YEAR = re.compile(r"\b((?:19|20)\d\d)\b")
_ISO = re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")
_AGO = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago\b", re.I)
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_SPAN = {"day": 1, "week": 7, "month": 30, "year": 365}


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


def _month_range(year: int, month: int) -> Period:
    first = date(year, month, 1)
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return first, nxt - timedelta(days=1)


def query_period(query: str, today: date) -> Period | None:
    """The period ``query`` names, if any (relative phrases count back from ``today``)."""
    text = query.casefold()
    iso = _ISO.search(text)
    if iso:
        try:
            day = date(int(iso[1]), int(iso[2]), int(iso[3]))
            return day, day
        except ValueError:
            pass
    if "yesterday" in text:
        day = today - timedelta(days=1)
        return day, day
    if re.search(r"\btoday\b|\bthis morning\b|\btonight\b", text):
        return today, today
    ago = _AGO.search(text)
    if ago:
        n = int(ago[1]) if ago[1].isdigit() else _WORDS[ago[1].casefold()]
        span = _SPAN[ago[2].casefold()]
        centre = today - timedelta(days=n * span)
        return centre - timedelta(days=span), centre + timedelta(days=span)
    for unit, span in _SPAN.items():
        if re.search(rf"\b(last|past|previous) {unit}\b", text):
            return today - timedelta(days=2 * span if unit == "day" else span), today
        if re.search(rf"\bthis {unit}\b", text):
            return today - timedelta(days=today.weekday() if unit == "week" else
                                     today.day - 1 if unit == "month" else
                                     today.timetuple().tm_yday - 1 if unit == "year" else 0), today
    month = _month_in(query)
    if month is not None:
        number, year = month
        if year is None:  # the most recent such month, this one included
            year = today.year if number <= today.month else today.year - 1
        return _month_range(year, number)
    year_match = _YEAR.search(text)
    if year_match:
        year = int(year_match[1])
        return date(year, 1, 1), date(year, 12, 31)
    return None


def _month_in(query: str) -> tuple[int, int | None] | None:
    """(month, year or None) for a month named in ``query``. "may" counts only as a month
    when capitalised mid-sentence or next to a year or a preposition of time: "may I …"
    is a verb."""
    for m in _MONTH.finditer(query):
        word = m.group(1)
        lower = word.casefold().rstrip(".")
        if lower == "may":
            lead = query[max(0, m.start(1) - 7):m.start(1)].casefold()
            capital_mid = word[0] == "M" and m.start(1) > 0
            if not (m.group(2) or capital_mid and re.search(r"(in|of|since|by|during|early|late|mid)\s+$", lead)
                    or re.search(r"(in|since|by|during)\s+$", lead)):
                continue
        number = next(i for i, name in enumerate(_MONTHS, 1)
                      if lower == name or lower == name[:3] or (lower == "sept" and i == 9))
        return number, int(m.group(2)) if m.group(2) else None
    return None
