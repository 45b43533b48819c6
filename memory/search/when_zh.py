"""The time a Chinese query names: the same rules as ``when_en``, said the Chinese way.

昨天 / 前天 / 今天; "N天前", "三个月前", "几天前" (numbers in digits or characters, 两 too);
上周 / 这周, 上个月 / 本月, 去年 / 今年 / 前年; a weekday (周二, 星期二, 礼拜二; 上周二 is
Tuesday of the previous week); a date (2023年5月8日, 5月8号), a month (五月, 2023年5月), a
year (2023年); a season (去年夏天, 春天); a holiday (春节, 中秋, 国庆, 元旦, 圣诞, 情人节, 五一).
A query may mix languages ("我 last week 说的"): each language's rules read the whole
text, so either half can name the time.

Unlike English "last year", 去年 is only ever the previous calendar year, so it gets exactly
that; 上周 and 上个月 keep the English rule's generous range (the previous unit and the days
since), because "上周说的" is said both ways.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from lucidgate.memory.search.when_days import (
    Period, holiday_period, last_weekday, month_range, most_recent_month, season_period,
    week_start)

__all__ = ["chinese_period", "zh_number"]

_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
           "八": 8, "九": 9}
_NUM = r"(\d+|[零一二两三四五六七八九十]+|几|半)"
_AGO = re.compile(_NUM + r"\s*(?:个)?\s*(天|日|周|星期|礼拜|月|年)(?:之|以)?前")
_DATE = re.compile(r"(?:((?:19|20)\d\d)\s*年)?\s*(\d{1,2}|[一二三四五六七八九十]+)\s*月"
                   r"(?:\s*(\d{1,2}|[一二三四五六七八九十]+)\s*[日号])?")
_YEAR = re.compile(r"((?:19|20)\d\d)\s*年")
_WEEKDAY = re.compile(r"(上上|上个|上)?\s*(?:周|星期|礼拜)([一二三四五六日天])")
_WEEKDAY_INDEX = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_SEASON = re.compile(r"(去年|今年|前年|((?:19|20)\d\d)\s*年)?\s*的?(春|夏|秋|冬)(?:天|季)")
_SEASONS = {"春": "spring", "夏": "summer", "秋": "autumn", "冬": "winter"}
_HOLIDAYS = [("春节", "lunar new year"), ("过年", "lunar new year"), ("中秋", "mid-autumn festival"),
             ("国庆", "national day"), ("元旦", "new year"), ("圣诞", "christmas"),
             ("情人节", "valentine's day"), ("五一", "labour day"), ("劳动节", "labour day"),
             ("万圣节", "halloween"), ("感恩节", "thanksgiving"), ("复活节", "easter")]
_SPAN = {"天": 1, "日": 1, "周": 7, "星期": 7, "礼拜": 7, "月": 30, "年": 365}


def zh_number(text: str) -> int | None:
    """``"12"``, ``"十二"``, ``"两"``, ``"二十三"`` as an int (None if not a number)."""
    if text.isdigit():
        return int(text)
    if not text or any(ch not in _DIGITS and ch != "十" for ch in text):
        return None
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_DIGITS[tens] if tens else 1) * 10 + (_DIGITS[ones] if ones else 0)
    value = 0
    for ch in text:
        value = value * 10 + _DIGITS[ch]
    return value


def chinese_period(text: str, today: date) -> Period | None:
    for rule in (_days, _ago, _weekday, _units, _season, _holiday, _date):
        found = rule(text, today)
        if found is not None:
            return found
    return None


def _days(text: str, today: date) -> Period | None:
    for words, back in ((("大前天",), 3), (("前天",), 2), (("昨天", "昨晚", "昨日"), 1),
                        (("今天", "今晚", "今早", "今日"), 0)):
        if any(w in text for w in words):
            day = today - timedelta(days=back)
            return day, day
    return None


def _ago(text: str, today: date) -> Period | None:
    m = _AGO.search(text)
    if not m:
        return None
    span = _SPAN[m[2]]
    if m[1] == "几":  # "a few": the last week's worth of that unit, loosely
        return today - timedelta(days=7 * span), today
    n = 0.5 if m[1] == "半" else zh_number(m[1])
    if n is None:
        return None
    centre = today - timedelta(days=round(n * span))
    return centre - timedelta(days=span), centre + timedelta(days=span)


def _weekday(text: str, today: date) -> Period | None:
    m = _WEEKDAY.search(text)
    if not m:
        return None
    weeks_back = {"上上": 2, "上个": 1, "上": 1}.get(m[1] or "", 0)
    day = last_weekday(_WEEKDAY_INDEX[m[2]], today, weeks_back=weeks_back)
    return day, day


def _units(text: str, today: date) -> Period | None:
    if re.search(r"上(?:个)?(?:周|星期|礼拜)", text):
        return week_start(today) - timedelta(days=7), today
    if re.search(r"(?:这|本)(?:个)?(?:周|星期|礼拜)", text):
        return week_start(today), today
    if re.search(r"上(?:个)?月", text):
        prev = today.replace(day=1) - timedelta(days=1)
        return month_range(prev.year, prev.month)[0], today
    if re.search(r"(?:这|本)(?:个)?月", text):
        return today.replace(day=1), today
    for word, back in (("前年", 2), ("去年", 1), ("今年", 0)):
        if word in text and not _SEASON.search(text):
            return date(today.year - back, 1, 1), date(today.year - back, 12, 31)
    return None


def _season(text: str, today: date) -> Period | None:
    m = _SEASON.search(text)
    if not m:
        return None
    season = _SEASONS[m[3]]
    if m[2]:
        return season_period(season, today, int(m[2]))
    if m[1]:
        back = {"今年": 0, "去年": 1, "前年": 2}[m[1]]
        return season_period(season, today, today.year - back)
    return season_period(season, today)


def _holiday(text: str, today: date) -> Period | None:
    for word, name in _HOLIDAYS:
        if word in text:
            year = _YEAR.search(text)
            if year:
                return holiday_period(name, today, int(year[1]))
            if "去年" in text:
                return holiday_period(name, today, today.year - 1)
            return holiday_period(name, today)
    return None


def _date(text: str, today: date) -> Period | None:
    m = _DATE.search(text)
    if m:
        month = zh_number(m[2])
        if month is not None and 1 <= month <= 12:
            year = int(m[1]) if m[1] else None
            if m[3]:
                day_no = zh_number(m[3])
                if day_no is not None:
                    if year is None:
                        year = today.year if (month, day_no) <= (today.month, today.day) else today.year - 1
                    try:
                        day = date(year, month, day_no)
                        return day, day
                    except ValueError:
                        return None
            return most_recent_month(month, today, year)
    named = _YEAR.search(text)
    if named:
        return date(int(named[1]), 1, 1), date(int(named[1]), 12, 31)
    return None
