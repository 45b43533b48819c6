"""Issue 42's date rules, each on its own: how people name time (relative days, weeks and
months, weekdays, seasons, holidays, before/after, the first or last time, ordinals) in
English, Chinese and a mix, and what the ranking does with it on small hand-made memories."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from lucidgate.memory.search import MemoryIndex, search
from lucidgate.memory.search.rank import Candidate, time_factors
from lucidgate.memory.search.when import TimeIntent, query_time
from lucidgate.memory.search.when_zh import zh_number
from tests.search_kit import transcript

TODAY = date(2026, 11, 26)  # a Thursday
D = date


@pytest.mark.parametrize(("query", "period"), [
    # relative days, weeks, months, years
    ("what did I say the day before yesterday", (D(2026, 11, 24), D(2026, 11, 24))),
    ("what did we talk about last night", (D(2026, 11, 25), D(2026, 11, 25))),
    ("the thing I mentioned the other day", (D(2026, 11, 19), D(2026, 11, 26))),
    ("what did I cook three days ago", (D(2026, 11, 22), D(2026, 11, 24))),
    ("the film from a couple of weeks ago", (D(2026, 11, 5), D(2026, 11, 19))),
    ("what did I plan in the last 3 months", (D(2026, 8, 28), D(2026, 11, 26))),
    ("last week's plan", (D(2026, 11, 16), D(2026, 11, 26))),  # previous week and the days since
    ("the budget from last month", (D(2026, 10, 1), D(2026, 11, 26))),
    ("what did I read last year", (D(2025, 1, 1), D(2026, 11, 26))),
    ("the idea I had this week", (D(2026, 11, 23), D(2026, 11, 26))),
    # weekdays and weekends
    ("what did I eat on Tuesday", (D(2026, 11, 24), D(2026, 11, 24))),
    ("the call last Thursday", (D(2026, 11, 19), D(2026, 11, 19))),  # today is Thursday
    ("what did we do last weekend", (D(2026, 11, 21), D(2026, 11, 22))),
    # seasons
    ("the trip last summer", (D(2026, 6, 1), D(2026, 8, 31))),
    ("what did we plant in the spring of 2024", (D(2024, 3, 1), D(2024, 5, 31))),
    ("the flu this winter", (D(2025, 12, 1), D(2026, 2, 28))),  # the latest winter begun
    ("in the fall of 2023", (D(2023, 9, 1), D(2023, 11, 30))),
    # holidays
    ("what did we give at Christmas", (D(2025, 12, 22), D(2025, 12, 28))),
    ("Thanksgiving 2023 dinner", (D(2023, 11, 20), D(2023, 11, 26))),
    ("the Easter trip", (D(2026, 4, 2), D(2026, 4, 8))),  # Easter 2026: 5 April
    ("the party on Halloween", (D(2026, 10, 28), D(2026, 11, 3))),
    # before / after a time
    ("what did I say before May 2023", (D.min, D(2023, 4, 30))),
    ("everything after March 2024", (D(2024, 4, 1), D.max)),
    ("notes since 2025", (D(2026, 1, 1), D.max)),
    # a whole date, and spans counted from one
    ("the painting shown on October 13, 2023", (D(2023, 10, 13), D(2023, 10, 13))),
    ("what happened on 7 July, 2023", (D(2023, 7, 7), D(2023, 7, 7))),
    ("the 3rd of June", (D(2026, 6, 3), D(2026, 6, 3))),
    ("the week before August 3, 2023", (D(2023, 7, 27), D(2023, 8, 2))),
    ("the puppy she got two weeks before August 11, 2023", (D(2023, 7, 21), D(2023, 8, 4))),
    ("a month after 1 March 2024", (D(2024, 3, 2), D(2024, 3, 31))),
])
def test_english_time_phrases_name_their_period(query: str, period: tuple[date, date]) -> None:
    assert query_time(query, TODAY).period == period


@pytest.mark.parametrize(("query", "period"), [
    ("我昨天说了什么", (D(2026, 11, 25), D(2026, 11, 25))),
    ("前天的会议", (D(2026, 11, 24), D(2026, 11, 24))),
    ("三天前吃了什么", (D(2026, 11, 22), D(2026, 11, 24))),
    ("两个月前的计划", (D(2026, 8, 28), D(2026, 10, 27))),
    ("上周的计划", (D(2026, 11, 16), D(2026, 11, 26))),
    ("上周二去了哪里", (D(2026, 11, 17), D(2026, 11, 17))),
    ("星期天做了什么", (D(2026, 11, 22), D(2026, 11, 22))),
    ("上个月的账单", (D(2026, 10, 1), D(2026, 11, 26))),
    ("去年读了什么书", (D(2025, 1, 1), D(2025, 12, 31))),
    ("2023年5月的旅行", (D(2023, 5, 1), D(2023, 5, 31))),
    ("五月份说的事", (D(2026, 5, 1), D(2026, 5, 31))),
    ("5月8号的电话", (D(2026, 5, 8), D(2026, 5, 8))),
    ("去年夏天去的海边", (D(2025, 6, 1), D(2025, 8, 31))),
    ("春节的时候", (D(2026, 2, 14), D(2026, 2, 26))),  # 17 Feb 2026, a week long
    ("中秋节吃了月饼", (D(2026, 9, 22), D(2026, 9, 28))),
    ("2023年5月之后", (D(2023, 6, 1), D.max)),
    ("我 last week 说的那家店", (D(2026, 11, 16), D(2026, 11, 26))),  # mixed languages
    ("what did 小明 say 昨天", (D(2026, 11, 25), D(2026, 11, 25))),
])
def test_chinese_and_mixed_time_phrases_name_their_period(query: str, period: tuple[date, date]) -> None:
    assert query_time(query, TODAY).period == period


@pytest.mark.parametrize("query", [
    "may I ask about the garden", "did she fall on the stairs", "may 2 people come",
    "I have 2 march tickets", "what do we do on Sundays",
    "marching band practice", "我以前住在哪里", "我上次说的那个餐厅叫什么", "what is my job"])
def test_words_that_only_look_like_time_name_no_period(query: str) -> None:
    assert query_time(query, TODAY).period is None


@pytest.mark.parametrize(("query", "order", "asks_when"), [
    ("the first time we went camping", "first", False),
    ("我第一次去北京是什么时候", "first", True),
    ("when did I last see the dentist? the last time", "last", True),
    ("what did Anna say most recently", "last", False),
    ("我上次说的那个餐厅叫什么", "last", False),
    ("the second time she ran a marathon", None, True),
    ("我第三次去上海", None, True),
    ("What is my favourite colour?", None, False),
])
def test_order_and_when_words_are_read(query: str, order: str | None, asks_when: bool) -> None:
    intent = query_time(query, TODAY)
    assert (intent.order, intent.asks_when) == (order, asks_when)


def test_before_or_after_an_event_is_an_anchor_to_look_up() -> None:
    assert query_time("what did we eat after the pride parade?", TODAY).anchor == \
        ("after", "the pride parade")
    assert query_time("搬家之前住在哪里", TODAY).anchor == ("before", "搬家")
    assert query_time("what did I do before", TODAY).anchor is None  # nothing to look up


def test_chinese_numbers() -> None:
    assert [zh_number(t) for t in ("3", "三", "两", "十", "十二", "二十三", "九十九", "个")] == \
        [3, 3, 2, 10, 12, 23, 99, None]


def _camping(days: list[str]) -> list[Candidate]:
    return [Candidate(i, "", day, score=0.8) for i, day in enumerate(days)]


def test_the_first_time_prefers_the_earliest_strong_match_however_old() -> None:
    """Three tellings of one kind of trip, all long ago: "the first time" wants the oldest,
    recency would have picked the newest."""
    cands = _camping(["2023-07-01", "2023-03-10", "2023-09-20"])
    cands.append(Candidate(9, "", "2022-01-01", score=0.2))  # a weak, older mention
    time_factors(cands, query="the first time we went camping", today=TODAY, period=None,
                 half_life_days=30, floor=0.5)
    assert max(cands, key=lambda c: c.score).chunk_id == 1
    plain = _camping(["2023-07-01", "2023-03-10", "2023-09-20"])
    time_factors(plain, query="camping trip", today=TODAY, period=None, half_life_days=30, floor=0.5)
    assert max(plain, key=lambda c: c.score).chunk_id == 2


def test_the_last_time_counts_from_the_latest_match_not_from_today() -> None:
    cands = _camping(["2023-07-01", "2023-03-10", "2023-09-20"])
    time_factors(cands, query="上次去露营", today=TODAY, period=None, half_life_days=30, floor=0.5)
    scores = {c.chunk_id: c.score for c in cands}
    assert scores[2] == pytest.approx(0.8)  # the latest keeps its full score, years later
    assert scores[2] > scores[0] > scores[1]


def test_an_ordinal_asks_for_an_order_so_recency_is_off() -> None:
    cands = _camping(["2023-07-01", "2026-11-20"])
    time_factors(cands, query="the second time we went camping", today=TODAY, period=None,
                 half_life_days=30, floor=0.5)
    assert cands[0].score == cands[1].score == 0.8


def test_what_happened_in_a_period_may_be_told_a_few_days_later() -> None:
    told = _camping(["2023-06-12", "2023-07-20"])  # a June weekend, told on the Monday
    time_factors(told, query="what did we do on the weekend of 10 June 2023", today=TODAY,
                 period=(D(2023, 6, 10), D(2023, 6, 11)), half_life_days=30, floor=0.5)
    assert told[0].score == 0.8 and told[1].score == 0.4


def test_a_period_memory_holds_nothing_from_is_no_preference() -> None:
    """"last summer" when nothing was said last summer: neither the period (everything would
    be floored and undated files float up) nor recency (the user named a time) decides."""
    cands = _camping(["2023-07-01", "2023-03-10"]) + [Candidate(7, "", None, score=0.8)]
    time_factors(cands, query="camping last summer", today=TODAY, period=(D(2026, 6, 1), D(2026, 8, 31)),
                 half_life_days=30, floor=0.5)
    assert [c.score for c in cands] == [0.8, 0.8, 0.8]


def _chat(ws: Path, key: str, day: str, pairs: list[tuple[str, str]]) -> None:
    (ws / "sessions").mkdir(exist_ok=True)
    messages = [m for pair in pairs for m in (("user", pair[0]), ("assistant", pair[1]))]
    (ws / "sessions" / f"{key.replace(':', '_')}.jsonl").write_text(
        transcript(key, messages, stamp=f"{day}T10:00:00+00:00"), encoding="utf-8")


def test_after_an_event_finds_the_event_then_prefers_what_came_later(tmp_path: Path) -> None:
    _chat(tmp_path, "web:a", "2026-03-02", [("Dinner at the noodle bar with Tom.", "Nice.")])
    _chat(tmp_path, "web:b", "2026-06-14", [("The pride parade was amazing!", "Glad you went.")])
    _chat(tmp_path, "web:c", "2026-06-20", [("Dinner at the noodle bar again, with Ana.", "Fun.")])
    _chat(tmp_path, "web:d", "2026-11-20", [("Dinner at the noodle bar, third visit with Tom.", "Ok.")])
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    plain = search(idx, "dinner at the noodle bar", k=1, today=TODAY)
    assert plain[0].session_key == "web:d"  # recency
    before = search(idx, "dinner at the noodle bar before the pride parade", k=2, today=TODAY)
    assert {h.session_key for h in before} == {"web:a", "web:b"}  # the event's day counts
    first = search(idx, "the first time we had dinner at the noodle bar", k=1, today=TODAY)
    assert first[0].session_key == "web:a"
    after = search(idx, "who came to dinner at the noodle bar after the pride parade?", k=3, today=TODAY)
    assert {h.session_key for h in after} == {"web:b", "web:c", "web:d"}
    idx.close()


def test_a_named_season_finds_that_seasons_chat(tmp_path: Path) -> None:
    _chat(tmp_path, "web:s", "2025-07-12", [("We swam in the lake by the cabin.", "Lovely.")])
    _chat(tmp_path, "web:w", "2026-01-20", [("We walked around the lake by the cabin.", "Cold!")])
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    assert search(idx, "the lake by the cabin", k=1, today=TODAY)[0].session_key == "web:w"
    assert search(idx, "去年夏天 the lake by the cabin", k=1, today=TODAY)[0].session_key == "web:s"
    idx.close()


def test_time_intent_defaults_are_empty() -> None:
    assert query_time("what is my cat's name", TODAY) == TimeIntent()
