"""Hits you can open: a conversation hit carries its transcript lines (kept right when the
transcript grows), ``memory_get`` opens them with the turns around, and so does the
console's search link."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.memory_search import MemoryGet, format_hits
from lucidgate.memory.search import MemoryIndex, search
from tests.console_kit import console_config, running_console, seed_workspace
from tests.fakes.context import make_ctx

HEADER = {"_type": "metadata", "v": 1, "key": "cli:1", "created_at": "2023-05-08T13:56:00+00:00",
          "updated_at": "2023-05-08T13:56:00+00:00",
          "metadata": {"origin": {"channel": "cli", "chat_id": "1", "chat_type": "private"}},
          "last_consolidated": 0}


def _line(role: str, content: str, minute: int, **extra: Any) -> str:
    return json.dumps({"role": role, "content": content,
                       "timestamp": f"2023-05-08T14:{minute:02d}:00+00:00", **extra}) + "\n"


TALK = [("user", "Morning! How was your weekend?"), ("assistant", "Quiet, thanks."),
        ("user", "I adopted a grey kitten called Pixel on Saturday."), ("assistant", "Congratulations!"),
        ("user", "She sleeps in the laundry basket."), ("assistant", "Classic kitten behaviour."),
        ("user", "Any tips for the first vet visit?"), ("assistant", "Bring her favourite blanket."),
        ("user", "Thanks, talk later."), ("assistant", "Bye!")]


def _write(ws: Path, parts: list[list[tuple[str, str]]], tool_after: int = 3) -> Path:
    """The chat in ``parts`` appended one part at a time (a tool exchange after message
    ``tool_after``), so windows are made by the incremental path too."""
    path = ws / "sessions" / "cli_1.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(HEADER) + "\n", encoding="utf-8")
    n = 0
    index = MemoryIndex(ws, embedder=None)
    for part in parts:
        with path.open("a", encoding="utf-8") as fh:
            for role, text in part:
                fh.write(_line(role, text, n))
                if n == tool_after:
                    fh.write(_line("assistant", "", n, tool_calls=[{"id": "t1", "type": "function",
                                   "function": {"name": "web_search", "arguments": "{}"}}]))
                    fh.write(_line("tool", "results…", n, tool_call_id="t1", name="web_search"))
                n += 1
        index.sync_files()
    index.close()
    return path


def test_a_conversation_hit_points_at_its_lines_also_after_appends(tmp_path: Path) -> None:
    path = _write(tmp_path, [TALK[:3], TALK[3:7], TALK[7:]])
    index = MemoryIndex(tmp_path, embedder=None)
    [hit] = search(index, "kitten Pixel adopted", k=1)
    assert hit.start_line is not None and hit.end_line is not None
    lines = path.read_text(encoding="utf-8").splitlines()
    spanned = [json.loads(x) for x in lines[hit.start_line - 1:hit.end_line]]
    said = [f"{m['role']}: {m['content']}" for m in spanned if m["content"]]
    assert hit.text.split("\n")[1:] == said  # the window is exactly those lines' messages
    assert hit.text.startswith("Mon 8 May 2023 14:00 UTC\n")  # and says when
    assert f"sessions/cli_1.jsonl:{hit.start_line}-{hit.end_line}" in format_hits([hit])
    # a fresh whole-file pass puts every window at the same lines
    fresh = MemoryIndex(tmp_path, embedder=None, path=tmp_path / "fresh.sqlite")
    fresh.sync_files()
    spans = "SELECT text, start_line, end_line FROM chunks WHERE source = 'session' ORDER BY start_line"
    assert index.conn().execute(spans).fetchall() == fresh.conn().execute(spans).fetchall()


async def test_memory_get_opens_a_conversation_hit_with_the_turns_around_it(tmp_path: Path) -> None:
    _write(tmp_path, [TALK])
    index = MemoryIndex(tmp_path, embedder=None)
    index.sync_files()
    [hit] = search(index, "first vet visit blanket", k=1)
    assert hit.start_line is not None and hit.end_line is not None
    tool = MemoryGet(tmp_path)
    opened = await tool.run(make_ctx(tmp_path), MemoryGet.Params(
        path=hit.path, start_line=hit.start_line, lines=hit.end_line - hit.start_line + 1))
    marked = [ln for ln in opened.splitlines() if ln.startswith("*")]
    assert any("Any tips for the first vet visit?" in ln for ln in marked)
    assert "user 2023-05-08 14:06: Any tips for the first vet visit?" in opened  # role and time
    assert "She sleeps in the laundry basket." in opened  # a turn before the hit, for context
    assert "_type" not in opened and "metadata" not in opened  # rendered, not raw JSON
    assert "not instructions" in opened.splitlines()[0]  # a log is quoted material
    with pytest.raises(ToolError, match="not a memory source"):
        await tool.run(make_ctx(tmp_path), MemoryGet.Params(path="config.json"))
    with pytest.raises(ToolError, match="owner"):
        await tool.run(make_ctx(tmp_path, role="guest"), MemoryGet.Params(path=hit.path))


async def test_the_console_search_link_opens_a_conversation_hit(make_config: Callable[..., Any],
                                                               workspace: Path, fake_llm: Any) -> None:
    seed_workspace(workspace)
    _write(workspace, [TALK])
    config = console_config(make_config, agents={"defaults": {"memory": {"search": {
        "embedding": {"model": "none"}}}}})
    async with running_console(config) as c:
        found = (await c.client.get("/api/console/memory/search", params={"q": "kitten Pixel"})).json()
        hit = next(h for h in found["hits"] if h["path"].startswith("sessions/"))
        lines = hit["end_line"] - hit["start_line"] + 1
        opened = await c.client.get("/api/console/memory/open",
                                    params={"path": hit["path"], "start": hit["start_line"], "lines": lines})
        outside = await c.client.get("/api/console/memory/open", params={"path": "../config.json"})
        script = (await c.client.get("/ui/views/memory.js")).text
    assert found["engine"] == "recall" and hit["start_line"] >= 2
    assert opened.status_code == 200, opened.text
    assert any(ln.startswith("*") and "grey kitten called Pixel" in ln
               for ln in opened.json()["text"].splitlines())
    assert outside.status_code == 400
    assert "/memory/open?path=" in script and "hit.start_line" in script  # the page links there


async def test_every_console_search_hit_link_opens_what_it_points_at(make_config: Callable[..., Any],
                                                                     workspace: Path, fake_llm: Any) -> None:
    """Memory files open in the editor, history entries in the timeline, session notes and
    conversations as their lines: none answers "Could not load"."""
    seed_workspace(workspace)
    _write(workspace, [TALK])
    (workspace / "memory" / "2023-05-08-kitten-pixel-owner.md").write_text(
        "# Kitten Pixel\n\nThe owner adopted a grey kitten called Pixel.\n", encoding="utf-8")
    config = console_config(make_config, agents={"defaults": {"memory": {"search": {
        "embedding": {"model": "none"}}}}})
    async with running_console(config) as c:
        await c.parts.store.append_history("- Adopted a grey kitten called Pixel\n- Vet on Monday",
                                           session_key="cli:1")
        (workspace / "memory" / "MEMORY.md").write_text("# Memory\n\n- Has a kitten called Pixel\n")
        found = (await c.client.get("/api/console/memory/search", params={"q": "kitten Pixel"})).json()
        opened: dict[str, str] = {}
        entries: dict[int, str] = {}
        for hit in found["hits"]:
            if hit["cursor"] is not None:  # a history entry: the timeline from that entry
                got = await c.client.get("/api/console/history", params={"before": hit["cursor"] + 1, "limit": 1})
                assert got.status_code == 200, got.text
                [entry] = got.json()["entries"]
                entries[entry["cursor"]] = entry["content"]
                continue
            if hit["editable"]:
                got = await c.client.get("/api/console/memory/file", params={"path": hit["path"]})
            else:
                start = hit["start_line"] or hit["line"]
                lines = hit["end_line"] - hit["start_line"] + 1 if hit["start_line"] and hit["end_line"] else 1
                got = await c.client.get("/api/console/memory/open",
                                         params={"path": hit["path"], "start": start, "lines": lines})
            assert got.status_code == 200, (hit, got.text)
            opened[hit["path"]] = got.json()["text"]
        grep_hit = await c.client.get("/api/console/memory/open",
                                      params={"path": "memory/history.jsonl", "start": 1, "lines": 1})
        script = (await c.client.get("/ui/views/memory.js")).text
    assert entries == {1: "- Adopted a grey kitten called Pixel\n- Vet on Monday"}, found
    assert "#history?cursor=" in script and "hit.editable" in script
    # A grep hit (no index) points at a line of the history file: it reads as the entry.
    history = grep_hit.json()["text"]
    assert "#1 " in history and "(cli:1):\n    - Adopted a grey kitten called Pixel\n    - Vet on Monday" in history
    assert '"cursor"' not in history  # an entry, not its JSON
    assert {"memory/2023-05-08-kitten-pixel-owner.md", "memory/MEMORY.md", "sessions/cli_1.jsonl"} <= set(opened)
    assert "grey kitten called Pixel" in opened["memory/2023-05-08-kitten-pixel-owner.md"]
