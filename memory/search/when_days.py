"""Calendar arithmetic for the periods a query names: months, weeks, seasons, holidays.

Every function answers "which dates does this phrase cover, seen from ``today``", as an
inclusive ``(first, last)`` pair. A phrase without a year means its most recent occurrence
that has begun by ``today`` (people ask their memory about the past: "in December" said in
November is last December). A holiday covers a few days either side of the day itself,
because what is said about it is said while preparing and just after ("at Christmas").
Seasons are the meteorological ones of the northern hemisphere (spring = March–May …);
a user in the south gets the wrong half-year, which only costs the preference, never a hit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta

__all__ = ["HOLIDAYS", "SEASONS", "holiday_period", "last_weekday", "month_range",
           "most_recent_month", "season_period", "week_start"]

Period = tuple[date, date]

# Days either side of a holiday that still count as "at" it.
HOLIDAY_SLACK = 3


def month_range(year: int, month: int) -> Period:
    first = date(year, month, 1)
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return first, nxt - timedelta(days=1)


def most_recent_month(month: int, today: date, year: int | None = None) -> Period:
    """``month`` of ``year``, or without a year the latest one that has begun by ``today``."""
    if year is None:
        year = today.year if month <= today.month else today.year - 1
    return month_range(year, month)


def week_start(day: date) -> date:
    """The Monday of ``day``'s week."""
    return day - timedelta(days=day.weekday())


def last_weekday(weekday: int, today: date, *, weeks_back: int = 0) -> date:
    """The most recent ``weekday`` (0 = Monday) before ``today``; ``weeks_back=1`` is that
    weekday in the previous calendar week ("上周二": Tuesday of last week)."""
    if weeks_back:
        return week_start(today) - timedelta(days=7 * weeks_back) + timedelta(days=weekday)
    back = (today.weekday() - weekday) % 7 or 7
    return today - timedelta(days=back)


# Season → the month it starts in and its length in months (meteorological, northern).
SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "winter": 12}


def season_period(season: str, today: date, year: int | None = None, *, previous: bool = False) -> Period:
    """The season's months. Without ``year``: the latest one begun by ``today`` (``previous``:
    the one before it, "last summer" said in summer). Winter ``year`` is the one starting
    in December of that year."""
    start_month = SEASONS[season]
    if year is None:
        year = today.year if date(today.year, start_month, 1) <= today else today.year - 1
        if previous:
            year -= 1
    first = date(year, start_month, 1)
    end_year, end_month = (year + 1, 2) if start_month == 12 else (year, start_month + 2)
    return first, month_range(end_year, end_month)[1]


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    """The ``n``-th ``weekday`` of the month (``n = -1``: the last one)."""
    if n > 0:
        first = date(year, month, 1)
        return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))
    last = month_range(year, month)[1]
    return last - timedelta(days=(last.weekday() - weekday) % 7)


def _easter(year: int) -> date:
    """Western Easter Sunday (the anonymous Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = b // 4, b % 4
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = c // 4, c % 4
    leap = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * leap) // 451
    month = (h + leap - 7 * m + 114) // 31
    day = (h + leap - 7 * m + 114) % 31 + 1
    return date(year, month, day)


# Lunar New Year's day (春节) by year: lunar dates need a table, not a formula.
_LUNAR_NEW_YEAR = {
    2015: (2, 19), 2016: (2, 8), 2017: (1, 28), 2018: (2, 16), 2019: (2, 5), 2020: (1, 25),
    2021: (2, 12), 2022: (2, 1), 2023: (1, 22), 2024: (2, 10), 2025: (1, 29), 2026: (2, 17),
    2027: (2, 6), 2028: (1, 26), 2029: (2, 13), 2030: (2, 3), 2031: (1, 23), 2032: (2, 11),
    2033: (1, 31), 2034: (2, 19), 2035: (2, 8),
}
# Mid-Autumn Festival (中秋节), the 15th day of the eighth lunar month.
_MID_AUTUMN = {
    2015: (9, 27), 2016: (9, 15), 2017: (10, 4), 2018: (9, 24), 2019: (9, 13), 2020: (10, 1),
    2021: (9, 21), 2022: (9, 10), 2023: (9, 29), 2024: (9, 17), 2025: (10, 6), 2026: (9, 25),
    2027: (9, 15), 2028: (10, 3), 2029: (9, 22), 2030: (9, 12), 2031: (10, 1), 2032: (9, 19),
    2033: (9, 8), 2034: (9, 27), 2035: (9, 16),
}


def _table(dates: dict[int, tuple[int, int]]) -> Callable[[int], date | None]:
    def day(year: int) -> date | None:
        md = dates.get(year)
        return date(year, *md) if md else None
    return day


# Holiday name → its day in a given year (None when unknown for that year), and how many
# days it lasts (a span such as China's National Day week).
HOLIDAYS: dict[str, tuple[Callable[[int], date | None], int]] = {
    "christmas": (lambda y: date(y, 12, 25), 1),
    "christmas eve": (lambda y: date(y, 12, 24), 1),
    "new year's eve": (lambda y: date(y, 12, 31), 1),
    "new year": (lambda y: date(y, 1, 1), 1),
    "halloween": (lambda y: date(y, 10, 31), 1),
    "valentine's day": (lambda y: date(y, 2, 14), 1),
    "independence day": (lambda y: date(y, 7, 4), 1),
    "thanksgiving": (lambda y: _nth_weekday(y, 11, 3, 4), 1),
    "easter": (_easter, 1),
    "mother's day": (lambda y: _nth_weekday(y, 5, 6, 2), 1),
    "father's day": (lambda y: _nth_weekday(y, 6, 6, 3), 1),
    "memorial day": (lambda y: _nth_weekday(y, 5, 0, -1), 1),
    "labor day": (lambda y: _nth_weekday(y, 9, 0, 1), 1),
    "lunar new year": (_table(_LUNAR_NEW_YEAR), 7),
    "mid-autumn festival": (_table(_MID_AUTUMN), 1),
    "national day": (lambda y: date(y, 10, 1), 7),
    "labour day": (lambda y: date(y, 5, 1), 5),
}


def holiday_period(name: str, today: date, year: int | None = None, *,
                   previous: bool = False) -> Period | None:
    """The days around holiday ``name``: of ``year``, or the latest one whose period has
    begun by ``today`` (``previous``: the one before that, "last Christmas" in late December)."""
    day_of, length = HOLIDAYS[name]
    years = [year] if year is not None else list(range(today.year, today.year - 3, -1))
    found = []
    for y in years:
        day = day_of(y)
        if day is None:
            continue
        period = (day - timedelta(days=HOLIDAY_SLACK), day + timedelta(days=length - 1 + HOLIDAY_SLACK))
        if year is not None or period[0] <= today:
            found.append(period)
    if previous and year is None:
        found = found[1:]
    return found[0] if found else None
