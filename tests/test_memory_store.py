"""MemoryStore (DESIGN §4.2, §5.1): history.jsonl, its cursors and the long-term files."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import re
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from lucidgate.memory import _history_index
from lucidgate.memory.errors import MemoryStoreError
from lucidgate.memory.store import MemoryStore


def lines(store: MemoryStore) -> list[dict]:
    """Every line of history.jsonl parsed: fails the test if any line is not JSON."""
    raw = store.history_path.read_bytes()
    assert raw.endswith(b"\n"), "history.jsonl must end on a complete line"
    return [json.loads(line) for line in raw.splitlines()]


def write_lines(path: Path, records: list[dict], tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)


def rec(cursor: int, content: str = "", key: str | None = "cli:local") -> dict:
    return {"cursor": cursor, "timestamp": "2026-01-01 10:00",
            "content": content or f"entry {cursor}", "session_key": key}


# ----------------------------------------------------------------------------- appending

async def test_append_writes_the_documented_line_format(workspace: Path) -> None:
    store = MemoryStore(workspace, timezone="Asia/Tokyo")
    first = await store.append_history("- likes tea\nand \u2028 odd breaks", session_key="telegram:42")
    second = await store.append_history("- second")
    assert (first, second) == (1, 2)
    data = lines(store)
    assert [d["cursor"] for d in data] == [1, 2]
    assert set(data[0]) == {"cursor", "timestamp", "content", "session_key"}
    assert data[0]["content"] == "- likes tea\nand \u2028 odd breaks"
    assert data[0]["session_key"] == "telegram:42" and data[1]["session_key"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", data[0]["timestamp"])
    stamped = datetime.strptime(data[0]["timestamp"], "%Y-%m-%d %H:%M").replace(tzinfo=ZoneInfo("Asia/Tokyo"))
    assert abs(datetime.now(ZoneInfo("Asia/Tokyo")) - stamped) < timedelta(minutes=2)
    assert store.cursor_path.read_text().strip() == "2"
    assert store.last_cursor() == 2 and store.unprocessed_count() == 2


async def test_concurrent_appends_in_one_process_get_unique_contiguous_cursors(workspace: Path) -> None:
    store = MemoryStore(workspace)
    cursors = await asyncio.gather(*(store.append_history(f"e{i}", session_key=f"k{i % 3}")
                                     for i in range(60)))
    assert sorted(cursors) == list(range(1, 61))
    assert [d["cursor"] for d in lines(store)] == list(range(1, 61))


def _append_many(workspace: str, tag: str, count: int, ready: multiprocessing.Queue,
                 go: multiprocessing.Event, results: multiprocessing.Queue) -> None:
    async def run() -> list[int]:
        store = MemoryStore(Path(workspace))
        ready.put(tag)
        go.wait(60)  # everyone starts appending at once
        return [await store.append_history(f"{tag}-{i}", session_key=f"proc:{tag}") for i in range(count)]

    results.put((tag, asyncio.run(run())))


async def test_appends_from_several_processes_never_collide(workspace: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_append_many, args=(str(workspace), f"p{n}", 25, ready, go, results))
             for n in range(4)]
    for proc in procs:
        proc.start()
    await asyncio.to_thread(lambda: [ready.get(timeout=60) for _ in procs])
    go.set()
    # This process appends at the same time, through its own store.
    local = MemoryStore(workspace)
    mine = [await local.append_history(f"main-{i}", session_key="proc:main") for i in range(25)]
    collected = dict(await asyncio.to_thread(lambda: [results.get(timeout=60) for _ in procs]))
    for proc in procs:
        await asyncio.to_thread(proc.join, 30)
        assert proc.exitcode == 0
    everything = sorted(mine + [c for cs in collected.values() for c in cs])
    assert everything == list(range(1, 126))  # unique and contiguous
    assert mine != list(range(1, 26)), "the writers did not actually overlap"
    data = lines(local)
    assert [d["cursor"] for d in data] == list(range(1, 126))
    for tag, cursors in collected.items():  # each writer's own order is kept
        assert cursors == sorted(cursors)
        assert [d["content"] for d in data if d["session_key"] == f"proc:{tag}"] == \
            [f"{tag}-{i}" for i in range(25)]
    await local.refresh()  # the sync accessors answer from the cache
    assert local.last_cursor() == 125
    assert len(await local.read_unprocessed()) == 125  # appends by others are seen


@pytest.mark.parametrize("cursor_file", [None, "garbage", ""])
async def test_cursor_file_is_rebuilt_from_the_last_line(workspace: Path, cursor_file: str | None,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(workspace)
    write_lines(store.history_path, [rec(3), rec(7)])
    if cursor_file is not None:
        store.cursor_path.write_text(cursor_file)
    with caplog.at_level(logging.WARNING):
        assert await store.append_history("next") == 8
    assert "rebuilt" in caplog.text
    assert store.cursor_path.read_text().strip() == "8"


async def test_cursor_file_ahead_of_the_log_wins(workspace: Path) -> None:
    store = MemoryStore(workspace)
    write_lines(store.history_path, [rec(1), rec(2)])
    store.cursor_path.write_text("40\n")  # entries 3..40 were lost; their cursors stay used
    assert await store.append_history("next") == 41


async def test_truncated_last_line_is_skipped_and_the_log_stays_valid(
        workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(workspace)
    write_lines(store.history_path, [rec(1), rec(2)], tail=b'{"cursor": 3, "timestamp": "2026-01-0')
    assert [e.cursor for e in await store.read_unprocessed()] == [1, 2]
    with caplog.at_level(logging.WARNING):
        assert await store.append_history("after the crash") == 3
    assert "incomplete line" in caplog.text
    data = lines(store)  # every line parses: the fragment is not left in the log
    assert [d["cursor"] for d in data] == [1, 2, 3]
    assert data[-1]["content"] == "after the crash"
    assert store.partial_path.read_bytes() == b'{"cursor": 3, "timestamp": "2026-01-0\n'


async def test_a_valid_last_line_without_newline_is_kept(workspace: Path) -> None:
    store = MemoryStore(workspace)
    write_lines(store.history_path, [rec(1)], tail=json.dumps(rec(2)).encode())
    assert await store.append_history("three") == 3
    assert [d["cursor"] for d in lines(store)] == [1, 2, 3]
    assert not store.partial_path.exists()


async def test_corrupt_and_out_of_order_lines_are_skipped(workspace: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(workspace)
    path = store.history_path
    path.parent.mkdir(parents=True)
    path.write_bytes(
        json.dumps(rec(1)).encode() + b"\n"
        + b"not json at all\n"
        + json.dumps({"cursor": "2", "content": "x"}).encode() + b"\n"
        + json.dumps(rec(5)).encode() + b"\n"
        + json.dumps(rec(4)).encode() + b"\n"  # goes backwards: skipped
        + b"\n"
        + json.dumps(rec(6)).encode() + b"\n"
    )
    with caplog.at_level(logging.WARNING):
        entries = await store.read_unprocessed()
    assert [e.cursor for e in entries] == [1, 5, 6]
    assert caplog.text.count("corrupt line") == 2 and "not above" in caplog.text
    assert await store.append_history("seven") == 7


# ----------------------------------------------------------------------------- the dream cursor

async def test_dream_cursor_past_the_end_is_clamped(workspace: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(workspace)
    write_lines(store.history_path, [rec(1), rec(2), rec(3)])
    store.cursor_path.write_text("3\n")
    store.dream_cursor_path.write_text("500\n")
    with caplog.at_level(logging.WARNING):
        assert store.dream_cursor() == 3
    assert "past the end" in caplog.text
    assert store.dream_cursor_path.read_text().strip() == "3"  # persisted, not just in memory
    assert await store.append_history("new") == 4
    assert [e.cursor for e in await store.read_unprocessed()] == [4]  # the new entry is not lost
    await store.set_dream_cursor(99)
    assert store.dream_cursor() == 4


async def test_dream_cursor_selects_unprocessed_entries(workspace: Path) -> None:
    store = MemoryStore(workspace)
    for i in range(10):
        await store.append_history(f"e{i + 1}")
    await store.set_dream_cursor(6)
    assert store.dream_cursor_path.read_text().strip() == "6"
    assert [e.cursor for e in await store.read_unprocessed()] == [7, 8, 9, 10]
    assert [e.cursor for e in await store.read_unprocessed(limit=2)] == [7, 8]
    # Entries before the dream cursor are no longer cached: they come from the file.
    assert [e.content for e in await store.read_unprocessed(since=2, limit=3)] == ["e3", "e4", "e5"]
    assert store.unprocessed_count() == 4
    # Another process (a fresh store) sees the same cursor.
    other = MemoryStore(workspace)
    assert other.dream_cursor() == 6 and other.unprocessed_count() == 4
    # Moving back re-opens entries, including for recent().
    await store.set_dream_cursor(2)
    assert [e.cursor for e in await store.recent(limit=3)] == [8, 9, 10]
    assert len(await store.recent(limit=100)) == 8


async def test_dream_cursor_changed_by_another_process_is_noticed(workspace: Path) -> None:
    gateway_store = MemoryStore(workspace)
    for i in range(5):
        await gateway_store.append_history(f"e{i}")
    assert len(await gateway_store.recent(limit=10)) == 5
    cli_store = MemoryStore(workspace)  # e.g. `lucid dream` beside the gateway
    await cli_store.set_dream_cursor(4)
    assert [e.cursor for e in await gateway_store.recent(limit=10)] == [5]


# ----------------------------------------------------------------------------- recent()

async def test_recent_is_scoped_to_sessions_and_unprocessed_entries(workspace: Path) -> None:
    store = MemoryStore(workspace)
    keys = ["telegram:1", "telegram:2", "slack:C1", None]
    for i in range(40):
        await store.append_history(f"e{i + 1}", session_key=keys[i % 4])
    await store.set_dream_cursor(20)
    mine = await store.recent(limit=3, session_keys=["telegram:1"])
    assert [e.cursor for e in mine] == [29, 33, 37]
    assert all(e.session_key == "telegram:1" for e in mine)
    both = await store.recent(limit=4, session_keys={"telegram:1", "telegram:2"})
    assert [e.cursor for e in both] == [33, 34, 37, 38]  # merged, oldest first
    assert [e.cursor for e in await store.recent(limit=3)] == [38, 39, 40]
    assert await store.recent(limit=5, session_keys=["whatsapp:9"]) == []
    assert await store.recent(limit=5, session_keys=[]) == []
    assert await store.recent(limit=0) == []
    everything = await store.recent(limit=1000, session_keys=["telegram:1"])
    assert [e.cursor for e in everything] == [21, 25, 29, 33, 37]  # nothing at or before 20


async def test_recent_reads_no_file_when_nothing_changed(workspace: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore(workspace)
    for i in range(30):
        await store.append_history(f"e{i}", session_key="cli:local")
    await store.recent(limit=5)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("recent() read history.jsonl although nothing was appended")

    monkeypatch.setattr(_history_index.HistoryIndex, "_consume", forbidden)
    monkeypatch.setattr(_history_index.HistoryIndex, "_read_entries", forbidden)
    for _ in range(20):
        assert len(await store.recent(limit=5, session_keys=["cli:local"])) == 5
    monkeypatch.undo()
    # An append by another process is picked up incrementally on the next call.
    await MemoryStore(workspace).append_history("from elsewhere", session_key="cli:local")
    assert (await store.recent(limit=1))[0].content == "from elsewhere"


# ----------------------------------------------------------------------------- compaction

async def test_compaction_never_drops_unprocessed_entries(workspace: Path) -> None:
    store = MemoryStore(workspace, max_history_entries=10)
    other = MemoryStore(workspace, max_history_entries=10)
    for i in range(30):
        await store.append_history(f"e{i + 1}")
    assert len(await other.read_unprocessed()) == 30
    assert await store.compact_history() == 0  # nothing processed yet: nothing may go
    await store.set_dream_cursor(5)
    assert await store.compact_history() == 5
    assert [d["cursor"] for d in lines(store)] == list(range(6, 31))
    await store.set_dream_cursor(28)
    assert await store.compact_history() == 15
    assert [d["cursor"] for d in lines(store)] == list(range(21, 31))
    assert await store.compact_history() == 0
    assert [e.cursor for e in await store.read_unprocessed()] == [29, 30]
    # A store in another process notices the rewritten file and re-indexes it.
    assert [e.content for e in await other.read_unprocessed(since=24, limit=2)] == ["e25", "e26"]
    assert await other.append_history("e31") == 31
    assert [e.cursor for e in await store.recent(limit=5)] == [29, 30, 31]


# ----------------------------------------------------------------------------- long-term files

async def test_long_term_files_read_and_write_atomically(workspace: Path) -> None:
    store = MemoryStore(workspace)
    assert await store.read_text("memory") == ""  # a fresh workspace has none yet
    await store.write_text("memory", "# Memory\n- fact\n")
    await store.write_text("user", "# User\n")
    await store.write_text("soul", "# Soul\n")
    assert (workspace / "memory" / "MEMORY.md").read_text() == "# Memory\n- fact\n"
    assert await store.read_text("user") == "# User\n"
    assert (workspace / "SOUL.md").read_text() == "# Soul\n"
    leftovers = [p.name for p in workspace.rglob("*.tmp")]
    assert leftovers == []


def test_unknown_timezone_is_a_clear_error(workspace: Path) -> None:
    with pytest.raises(MemoryStoreError, match="unknown timezone"):
        MemoryStore(workspace, timezone="Mars/Olympus")
