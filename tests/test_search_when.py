"""Time in recall: the date line windows and history entries carry, and the period a query
names."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from lucidgate.memory.search.chunking import TranscriptHead, chunk_history, chunk_transcript
from lucidgate.memory.search.when import query_period, stamp_line, without_stamp

TODAY = date(2026, 11, 26)  # a Thursday


@pytest.mark.parametrize(("query", "period"), [
    ("what did we decide in May?", (date(2026, 5, 1), date(2026, 5, 31))),
    ("What did Melanie paint in May 2023?", (date(2023, 5, 1), date(2023, 5, 31))),
    ("the trip in December", (date(2025, 12, 1), date(2025, 12, 31))),  # the last December
    ("anything from sept 2024", (date(2024, 9, 1), date(2024, 9, 30))),
    ("what happened in 2023", (date(2023, 1, 1), date(2023, 12, 31))),
    ("notes from 2026-03-14", (date(2026, 3, 14), date(2026, 3, 14))),
    ("what did I say yesterday", (date(2026, 11, 25), date(2026, 11, 25))),
    ("the plan from last week", (date(2026, 11, 16), date(2026, 11, 26))),  # the week before and since
    ("what did I eat two weeks ago", (date(2026, 11, 5), date(2026, 11, 19))),
    ("this month's budget", (date(2026, 11, 1), date(2026, 11, 26))),
])
def test_a_query_naming_a_time_gets_that_period(query: str, period: tuple[date, date]) -> None:
    assert query_period(query, TODAY) == period


@pytest.mark.parametrize("query", ["may I ask about the garden", "When did Caroline go to the support group?",
                                   "what is my job", "我上次说的那个餐厅叫什么", "marching band"])
def test_a_query_without_a_time_has_no_period(query: str) -> None:
    assert query_period(query, TODAY) is None


def test_stamp_lines_say_the_day_and_a_day_change() -> None:
    assert stamp_line("2023-05-08T13:56:00+00:00") == "Mon 8 May 2023 13:56 UTC"
    assert stamp_line("2023-05-08T23:50:00+00:00", "2023-05-09T00:10:00+00:00") == \
        "Mon 8 May 2023 23:50 UTC – Tue 9 May 2023"
    assert stamp_line("2026-04-03 00:02") == "Fri 3 Apr 2026 00:02"  # history: no zone recorded
    assert stamp_line("") is None and stamp_line("yesterday") is None
    line = stamp_line("2023-05-08T23:50:00+00:00", "2023-05-09T00:10:00+00:00")
    assert without_stamp(f"{line}\nuser: hi") == "user: hi"
    assert without_stamp("Mon is my favourite day\nuser: hi") == "Mon is my favourite day\nuser: hi"


def test_windows_and_history_entries_carry_their_date(tmp_path: Path) -> None:
    lines = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}",
              "timestamp": f"2023-05-{8 + i // 4:02d}T13:56:00+00:00"} for i in range(6)]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    chunks, _ = chunk_transcript(data, TranscriptHead("cli:1", "cli", "private"), path="s.jsonl",
                                 owner=True, line=2)
    assert [c.text.split("\n")[0] for c in chunks] == ["Mon 8 May 2023 13:56 UTC", "Tue 9 May 2023 13:56 UTC"]
    assert [(c.start_line, c.end_line) for c in chunks] == [(2, 5), (6, 7)]
    history = json.dumps({"cursor": 7, "timestamp": "2026-04-03 00:02", "content": "- Paid rent",
                          "session_key": "cli:1"}).encode() + b"\n"
    [entry], _ = chunk_history(history, path="memory/history.jsonl")
    assert entry.text == "Fri 3 Apr 2026 00:02\n- Paid rent" and entry.date == "2026-04-03"
