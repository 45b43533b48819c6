"""The usage ledger keeps its running total in memory (the files are the journal, read once
at start) and writes journal lines in call order on one thread, all flushed at close."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from lucidgate.gateway.model.usage import UsageLedger
from lucidgate.memory.protocols import Usage


def _today_file(folder: Path) -> Path:
    return folder / f"{datetime.now(UTC).strftime('%Y-%m-%d')}.jsonl"


async def test_today_is_read_once_at_start_and_then_counted_in_memory(tmp_path: Path) -> None:
    folder = tmp_path / "usage"
    folder.mkdir()
    _today_file(folder).write_text(json.dumps({"ts": "x", "job": "turn", "session": "a", "model": "m",
                                               "prompt": 700, "completion": 100, "cached": 0}) + "\n")
    ledger = UsageLedger(folder, daily_budget=1000)
    await ledger.start()
    assert ledger.today_total() == 800 and not ledger.over_daily_budget()  # an earlier process's spend
    shutil.rmtree(folder)  # the check never goes back to the disk
    ledger.record(job="turn", session_key="a", model="m", usage=Usage(150, 50))
    assert ledger.today_total() == 1000 and ledger.over_daily_budget()
    await ledger.aclose()
    assert [json.loads(line)["prompt"] for line in _today_file(folder).read_text().splitlines()] == [150]


async def test_journal_lines_land_in_call_order_and_close_waits_for_all_of_them(tmp_path: Path) -> None:
    ledger = UsageLedger(tmp_path / "usage")
    await ledger.start()
    for n in range(300):
        ledger.record(job="turn", session_key=f"s{n}", model="m", usage=Usage(n + 1, 1))
    await ledger.aclose()  # nothing recorded before the close may be lost
    lines = [json.loads(line) for line in _today_file(tmp_path / "usage").read_text().splitlines()]
    assert [line["session"] for line in lines] == [f"s{n}" for n in range(300)]
    assert ledger.session_totals["s299"].prompt == 300
    summary = UsageLedger(tmp_path / "usage").summarise(days=1)
    assert sum(t.calls for t in summary.by_day.values()) == 300


async def test_each_guest_spends_at_most_its_share_and_a_restart_remembers_it(tmp_path: Path) -> None:
    from lucidgate.gateway.model.usage import turn_role

    folder = tmp_path / "usage"
    ledger = UsageLedger(folder, role_budgets={"guest": 1000}, guest_share=0.25)
    await ledger.start()
    with turn_role("guest", "telegram:7"):
        assert ledger.refusal() is None
        ledger.record(job="turn", session_key="telegram:7", model="m", usage=Usage(200, 50))
        refused = ledger.refusal()
    assert refused is not None and "usage.guestShare" in refused and "resets at 00:00 UTC" in refused
    with turn_role("guest", "telegram:8"):
        assert ledger.refusal() is None  # another sender has a share of its own
    await ledger.aclose()
    again = UsageLedger(folder, role_budgets={"guest": 1000}, guest_share=0.25)
    await again.start()  # a restart reads who spent what from the journal
    assert again.guest_total("telegram:7") == 250
    with turn_role("guest", "telegram:7"):
        assert again.refusal() is not None
    with turn_role("owner", "telegram:1"):
        assert again.refusal() is None
    await again.aclose()
