"""The time an English query names, as rules over how people say it.

Each rule turns one way of naming time into an inclusive date range (``when_days`` does
the calendar): an ISO date; yesterday / the day before yesterday / today; "N days (weeks,
months, years) ago" with words or digits; the other day, a few days ago; last / this
weekend; a weekday ("on Tuesday", "last Tuesday": the latest one before today); last /
previous / past / this week, month, year; a season ("last summer", "in the spring of
2023"); a holiday ("at Christmas", "Thanksgiving 2023"); a month ("in May", "May 2023");
a year. Relative phrases count back from ``today``: memory answers about the past.

"last week" covers the previous calendar week *and* the days since (people mean either
"the week before this one" or "the past seven days"): one range holding both readings is
never wrong, a narrower one is wrong half the time. The same goes for "last month" (the
previous month and this one so far) and "last year".
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from lucidgate.memory.search.when_days import (
    HOLIDAYS, Period, holiday_period, last_weekday, month_range, most_recent_month,
    season_period, week_start)

__all__ = ["MONTHS", "english_period", "month_in", "month_number"]

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]
_MONTH_ALT = "|".join(MONTHS + [m[:3] for m in MONTHS if m != "may"] + ["sept"])
_MONTH = re.compile(rf"\b(?:in|during|of|since|by|early|late|mid|last|this|next)?\s*"
                    rf"({_MONTH_ALT})\b\.?(?:\s*,?\s*((?:19|20)\d\d))?", re.I)
_YEAR = re.compile(r"\b((?:19|20)\d\d)\b")
_ORD = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR_TAIL = r"(?:,?\s*(?P<year>(?:19|20)\d\d))?"
_DAY_MONTH = re.compile(rf"\b{_ORD}\s+(?:of\s+)?(?P<month>{_MONTH_ALT})\b\.?{_YEAR_TAIL}", re.I)
_MONTH_DAY = re.compile(rf"\b(?P<month>{_MONTH_ALT})\.?\s+{_ORD}\b(?!:){_YEAR_TAIL}", re.I)
_ISO = re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")
_NUMBER = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
           "a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 4}
_COUNT = "|".join(sorted((re.escape(w) for w in _NUMBER), key=len, reverse=True))
_AGO = re.compile(rf"\b(\d+|{_COUNT})\s+(day|week|month|year)s?\s+ago\b", re.I)
_SPAN = {"day": 1, "week": 7, "month": 30, "year": 365}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
# "on Sundays" (a habit, not a day) does not match: the name must end the word.
_WEEKDAY = re.compile(r"\b(last|this past|past|on|this)?\s*(" + "|".join(_WEEKDAYS) + r")\b", re.I)
_SEASON_WORDS = {"spring": "spring", "summer": "summer", "autumn": "autumn", "fall": "autumn",
                 "winter": "winter"}
_SEASON = re.compile(r"\b(last|this|past|previous)?\s*(spring|summer|autumn|fall|winter)\b"
                     r"(?:\s+(?:of\s+)?((?:19|20)\d\d))?", re.I)
_HOLIDAY_WORDS = {
    "christmas eve": "christmas eve", "christmas": "christmas", "xmas": "christmas",
    "new year's eve": "new year's eve", "new years eve": "new year's eve",
    "new year's day": "new year", "new year's": "new year", "new years": "new year",
    "halloween": "halloween", "valentine's day": "valentine's day", "valentines day": "valentine's day",
    "valentine's": "valentine's day", "fourth of july": "independence day",
    "4th of july": "independence day", "july 4th": "independence day",
    "independence day": "independence day", "thanksgiving": "thanksgiving", "easter": "easter",
    "mother's day": "mother's day", "mothers day": "mother's day", "father's day": "father's day",
    "fathers day": "father's day", "memorial day": "memorial day", "labor day": "labor day",
    "chinese new year": "lunar new year", "lunar new year": "lunar new year",
    "mid-autumn festival": "mid-autumn festival", "moon festival": "mid-autumn festival",
}
_HOLIDAY = re.compile(r"\b(last|this|previous)?\s*(" + "|".join(
    re.escape(w) for w in sorted(_HOLIDAY_WORDS, key=len, reverse=True)) + r")(?!\w)"
    r"(?:\s+(?:of\s+)?((?:19|20)\d\d))?", re.I)
assert set(_HOLIDAY_WORDS.values()) <= set(HOLIDAYS)


def english_period(text: str, today: date) -> Period | None:
    """The period ``text`` (any case) names, trying the most specific phrasings first."""
    folded = text.casefold()
    found = _full_date(text, today)
    if found is not None:
        return found
    for rule in (_iso, _days, _ago, _weekend, _weekday, _units, _season, _holiday):
        found = rule(folded, today)
        if found is not None:
            return found
    month = month_in(text)
    if month is not None:
        return most_recent_month(month[0], today, month[1])
    year = _YEAR.search(folded)
    if year:
        return date(int(year[1]), 1, 1), date(int(year[1]), 12, 31)
    return None


def _full_date(text: str, today: date) -> Period | None:
    """(``text`` as written: case tells "May 2" from "may 2.") "on 7 July, 2023", "October 13, 2023", "the 3rd of June": that one day (without a
    year, its latest occurrence up to ``today``)."""
    m = next((m for m in (*_DAY_MONTH.finditer(text), *_MONTH_DAY.finditer(text))
              if m["year"] or m["month"].casefold() not in ("may", "march") or m["month"][0].isupper()),
             None)  # "may 2 people come" is not a date
    if not m:
        return None
    number = month_number(m["month"])
    day_no = int(m["day"])
    year = int(m["year"]) if m["year"] else (
        today.year if (number, day_no) <= (today.month, today.day) else today.year - 1)
    try:
        day = date(year, number, day_no)
    except ValueError:
        return None
    return day, day


def month_number(word: str) -> int:
    lower = word.casefold().rstrip(".")
    return next(i for i, name in enumerate(MONTHS, 1)
                if lower == name or lower == name[:3] or (lower == "sept" and i == 9))


def _iso(text: str, today: date) -> Period | None:
    iso = _ISO.search(text)
    if iso:
        try:
            day = date(int(iso[1]), int(iso[2]), int(iso[3]))
            return day, day
        except ValueError:
            return None
    return None


def _days(text: str, today: date) -> Period | None:
    if "day before yesterday" in text:
        day = today - timedelta(days=2)
        return day, day
    if "yesterday" in text or re.search(r"\blast night\b", text):
        day = today - timedelta(days=1)
        return day, day
    if re.search(r"\btoday\b|\bthis morning\b|\btonight\b|\bthis afternoon\b", text):
        return today, today
    if re.search(r"\bthe other day\b|\b(?:a )?few days ago\b|\bcouple of days ago\b", text):
        return today - timedelta(days=7), today
    return None


def _ago(text: str, today: date) -> Period | None:
    ago = _AGO.search(text)
    if not ago:
        return None
    n = int(ago[1]) if ago[1].isdigit() else _NUMBER[ago[1]]
    span = _SPAN[ago[2]]
    centre = today - timedelta(days=n * span)
    return centre - timedelta(days=span), centre + timedelta(days=span)


def _weekend(text: str, today: date) -> Period | None:
    if not re.search(r"\b(last|this past|past|this|the) weekend\b|\bover the weekend\b", text):
        return None
    if today.weekday() >= 5 and "last" not in text and "past" not in text:
        saturday = today - timedelta(days=today.weekday() - 5)
    else:
        saturday = last_weekday(5, today if today.weekday() != 6 else today - timedelta(days=1))
    return saturday, saturday + timedelta(days=1)


def _weekday(text: str, today: date) -> Period | None:
    for m in _WEEKDAY.finditer(text):
        day = last_weekday(_WEEKDAYS.index(m[2]), today)
        return day, day
    return None


def _units(text: str, today: date) -> Period | None:
    """last / previous / past / this week, month, year (and "in the last 3 weeks")."""
    many = re.search(r"\b(?:last|past|previous)\s+(\d+|" + _COUNT + r")\s+(day|week|month|year)s\b", text)
    if many:
        n = int(many[1]) if many[1].isdigit() else _NUMBER[many[1]]
        return today - timedelta(days=n * _SPAN[many[2]]), today
    for unit in ("week", "month", "year"):
        if re.search(rf"\b(last|past|previous) {unit}\b", text):
            if unit == "week":
                return week_start(today) - timedelta(days=7), today
            if unit == "month":
                first = today.replace(day=1)
                return month_range((first - timedelta(days=1)).year, (first - timedelta(days=1)).month)[0], today
            return date(today.year - 1, 1, 1), today
        if re.search(rf"\bthis {unit}\b", text):
            return (week_start(today) if unit == "week" else today.replace(day=1) if unit == "month"
                    else date(today.year, 1, 1)), today
    return None


def _season(text: str, today: date) -> Period | None:
    for m in _SEASON.finditer(text):
        # "fall" is a verb unless something marks it as the season.
        if m[2] != "fall" or m[1] or m[3] or re.search(r"\b(the|in|during)\s+$", text[:m.start(2)]):
            return _season_of(m, today)
    return None


def _season_of(m: re.Match[str], today: date) -> Period:
    season = _SEASON_WORDS[m[2]]
    if m[3]:
        return season_period(season, today, int(m[3]))
    current = season_period(season, today)
    previous = bool(m[1] and m[1] != "this") and current[0] <= today <= current[1]
    return season_period(season, today, previous=previous)


def _holiday(text: str, today: date) -> Period | None:
    m = _HOLIDAY.search(text)
    if not m:
        return None
    name = _HOLIDAY_WORDS[m[2]]
    if m[3]:
        return holiday_period(name, today, int(m[3]))
    current = holiday_period(name, today)
    previous = bool(m[1] and m[1] != "this") and current is not None and current[0] <= today <= current[1]
    return holiday_period(name, today, previous=previous)


def month_in(query: str) -> tuple[int, int | None] | None:
    """(month, year or None) for a month named in ``query``. "may" counts only as a month
    when capitalised mid-sentence or next to a year or a preposition of time: "may I …"
    is a verb. "march" and "fall" are verbs too, so they need the same company."""
    for m in _MONTH.finditer(query):
        word = m.group(1)
        lower = word.casefold().rstrip(".")
        if lower in ("may", "march"):
            lead = query[max(0, m.start(1) - 8):m.start(1)].casefold()
            capital_mid = word[0] == "M" and m.start(1) > 0
            if not (m.group(2) or capital_mid and re.search(r"(in|of|since|by|during|early|late|mid|last)\s+$", lead)
                    or re.search(r"(in|since|by|during|before|after|until)\s+$", lead)):
                continue
        return month_number(lower), int(m.group(2)) if m.group(2) else None
    return None
