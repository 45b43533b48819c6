"""grep under hostile patterns: a catastrophic regex ends as a tool error within the time
limit, and the event loop keeps running meanwhile (matching releases the GIL)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.search import Grep
from tests.fakes.context import make_ctx


async def test_a_catastrophic_pattern_is_stopped_and_the_loop_keeps_answering(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("fine line\n" + "a" * 5000 + "!\n")
    registry = ToolRegistry([Grep(time_limit_s=1.5)], max_result_chars=10_000)
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    counting = asyncio.create_task(ticker())
    out = await registry.execute(make_ctx(tmp_path), "grep", {"pattern": "(a|aa)+$"})
    done.set()
    await counting
    assert out.startswith("Error: the pattern took more than 1.5 s (stopped at notes.md:2)")
    assert "nested repetition" in out
    # With the GIL held for the whole search the loop could not have ticked more than once.
    assert ticks >= 10


async def test_the_classic_nested_quantifier_on_a_long_line_ends_within_the_limit(tmp_path: Path) -> None:
    (tmp_path / "long.txt").write_text("a" * 100_000 + "b\n")
    (tmp_path / "short.txt").write_text("aaa\n")
    registry = ToolRegistry([Grep(time_limit_s=2)], max_result_chars=10_000)
    ctx = make_ctx(tmp_path)
    out = await registry.execute(ctx, "grep", {"pattern": "(a+)+$"})
    assert out.startswith("Error: the pattern took more than 2 s (stopped at long.txt:1)")
    assert await registry.execute(ctx, "grep", {"pattern": "(a+)+$", "path": "short.txt"}) == "short.txt:1: aaa"


async def test_syntax_characters_and_bad_patterns(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("price (USD): 5*3\n")
    registry = ToolRegistry([Grep()], max_result_chars=10_000)
    ctx = make_ctx(tmp_path)
    assert await registry.execute(ctx, "grep", {"pattern": r"\(USD\): 5\*3"}) == "a.md:1: price (USD): 5*3"
    bad = await registry.execute(ctx, "grep", {"pattern": "(unclosed"})
    assert bad.startswith("Error: invalid regex '(unclosed'")


async def test_files_and_count_modes_are_a_cheap_first_look(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("todo one\nnothing\ntodo two\n")
    (tmp_path / "b.md").write_text("TODO three\n")
    (tmp_path / "c.md").write_text("clean\n")
    registry = ToolRegistry([Grep()], max_result_chars=10_000)
    ctx = make_ctx(tmp_path)
    lines = await registry.execute(ctx, "grep", {"pattern": "todo"})
    assert lines == "a.md:1: todo one\na.md:3: todo two"  # the default is unchanged
    assert await registry.execute(ctx, "grep", {"pattern": "todo", "ignore_case": True,
                                                "output": "files"}) == "a.md\nb.md"
    counted = await registry.execute(ctx, "grep", {"pattern": "todo", "ignore_case": True, "output": "count"})
    assert counted == "a.md: 2\nb.md: 1\n[3 matching line(s) in 2 file(s)]"
    assert (await registry.execute(ctx, "grep", {"pattern": "zzz", "output": "count"})).startswith("No matches")
    bad = await registry.execute(ctx, "grep", {"pattern": "todo", "output": "paths"})
    assert bad.startswith("Error: invalid arguments for grep")


async def test_files_mode_lists_past_the_line_limit(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"n{i}.md").write_text("hit\n" * 50)
    registry = ToolRegistry([Grep(max_matches=10, max_files_listed=3)], max_result_chars=10_000)
    out = await registry.execute(make_ctx(tmp_path), "grep", {"pattern": "hit", "output": "count"})
    assert out.splitlines()[:3] == ["n0.md: 50", "n1.md: 50", "n2.md: 50"]
    assert out.endswith("[showing the first 3 files; narrow the search]")
