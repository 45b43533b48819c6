"""``lucid memory search`` / ``reindex`` and the index line of ``lucid status``: the JSON
contract, bad input (exit 2), source filters, and a CLI process searching while a gateway
runs on the same workspace (watcher keeps the gateway's index current meanwhile)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.cli import build_app
from lucidgate.memory.search.sources import source_of
from tests.search_kit import write_corpus

KEYS = {"source", "path", "start_line", "end_line", "cursor", "session_key", "date", "score", "snippet"}


def _config(tmp_path: Path, model: str = "none") -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"defaults": {
        "workspace": str(tmp_path / "ws"), "model": "openai/fake-model",
        "memory": {"search": {"embedding": {"model": model}}}}}}))
    return path


def test_search_json_contract_sources_and_bad_input(tmp_path: Path) -> None:
    write_corpus(tmp_path / "ws")
    config = str(_config(tmp_path))
    runner = CliRunner()
    result = runner.invoke(build_app(), ["memory", "search", "Volvo", "--json", "--config", config])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert hits and set(hits[0]) >= KEYS
    top = hits[0]
    assert top["source"] == "history" and top["path"] == "memory/history.jsonl"
    assert isinstance(top["cursor"], int) and top["start_line"] is None and top["end_line"] is None
    assert top["session_key"] is None or isinstance(top["session_key"], str)
    assert top["date"] == "2026-02-10" and "Volvo XC40" in top["snippet"] and len(top["snippet"]) <= 700
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    notes = json.loads(runner.invoke(build_app(), ["memory", "search", "Miso vet", "--json", "--source",
                                                   "notes", "--limit", "2", "--config", config]).stdout)
    assert 0 < len(notes) <= 2 and {h["source"] for h in notes} == {"notes"}
    assert notes[0]["path"] == "memory/2026-03-14.md" and notes[0]["start_line"] == 1
    sessions = json.loads(runner.invoke(build_app(), ["memory", "search", "Clara", "--json", "--source",
                                                      "session", "--config", config]).stdout)
    assert sessions[0]["session_key"] == "telegram:42" and sessions[0]["cursor"] is None
    assert all(source_of(h["path"]) == "session" for h in sessions)

    for bad in (["memory", "search", "   "], ["memory", "search", "x", "--source", "bogus"],
                ["memory", "search", "x", "--limit", "0"]):
        result = runner.invoke(build_app(), [*bad, "--config", config])
        assert result.exit_code == 2, (bad, result.output)
    weird = runner.invoke(build_app(), ["memory", "search", '"*():-^', "--json", "--config", config])
    assert weird.exit_code == 0 and isinstance(json.loads(weird.stdout), list)


def test_reindex_and_status(tmp_path: Path) -> None:
    write_corpus(tmp_path / "ws")
    config = str(_config(tmp_path))
    runner = CliRunner()
    result = runner.invoke(build_app(), ["memory", "reindex", "--config", config])
    assert result.exit_code == 0 and "reindexed:" in result.stdout
    status = runner.invoke(build_app(), ["status", "--config", config])
    assert "recall:" in status.stdout and "chunks from 7 files" in status.stdout
    assert "keyword-only" in status.stdout  # embedding.model none says so plainly


@pytest.mark.slow
async def test_cli_searches_while_the_gateway_runs(tmp_path: Path) -> None:
    write_corpus(tmp_path / "ws")
    config_path = _config(tmp_path)
    from lucidgate.config import load_config

    gw = build_gateway(load_config(config_path))
    assert gw.parts.recall is not None
    gw.parts.recall.start_delay_s = 0  # build the index now rather than after the first turns
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    async with gw:
        recall = gw.parts.recall
        assert recall is not None
        # a note written while the gateway runs is picked up by the watcher, no search needed
        (tmp_path / "ws" / "memory" / "2026-06-01.md").write_text("# 2026-06-01\n\n- Adopted a tortoise named Speedy.\n")
        deadline = time.monotonic() + 120
        while not (await recall.status())["files"] >= 8:
            assert time.monotonic() < deadline
            recall.synced.clear()
            try:
                await asyncio.wait_for(recall.synced.wait(), 5)
            except TimeoutError:
                pass
        procs = [await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "memory", "search", query,
            "--json", "--config", str(config_path), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            for query in ("tortoise Speedy", "Volvo")]
        in_gateway = await recall.search("Clara birthday")
        outs = [await asyncio.wait_for(p.communicate(), 120) for p in procs]
    assert any("Clara" in h.text for h in in_gateway)
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    tortoise, volvo = (json.loads(o[0]) for o in outs)
    assert tortoise[0]["path"] == "memory/2026-06-01.md"
    assert "Volvo" in volvo[0]["snippet"]


def test_search_and_show_print_remembered_words_without_terminal_controls(tmp_path: Path) -> None:
    """Remembered text is partly other people's: an escape sequence stored in it reaches the
    owner's terminal as visible text, never as a command (retitle, clear screen, bell)."""
    notes = tmp_path / "ws" / "memory"
    notes.mkdir(parents=True)
    (notes / "2026-05-01.md").write_text(
        "# Notes\n\nGuest said: \x1b]0;pwned\x07 the samovar tea ceremony \x1b[2J\x1b[31mred\r\n",
        encoding="utf-8")
    config = str(_config(tmp_path))
    result = CliRunner().invoke(build_app(), ["memory", "search", "samovar tea ceremony", "--config", config],
                                color=True)
    assert result.exit_code == 0, result.output
    assert "samovar tea ceremony" in result.stdout
    without_our_styles = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout.replace("\x1b[31mred", "<stored colour>"))
    assert "<stored colour>" not in without_our_styles  # the stored SGR lost its escape too
    assert not any(c in without_our_styles for c in "\x1b\x07\r"), repr(without_our_styles)
    assert "[2J" in without_our_styles and "red" in without_our_styles  # still shown, as text
    assert "\x1b[1m1. memory/2026-05-01.md" in result.stdout  # our own styling is kept on a terminal

    (notes / "MEMORY.md").write_text("# Memory\n\n- Likes \x1b]0;pwned\x07tea\x1b[2J.\n", encoding="utf-8")
    shown = CliRunner().invoke(build_app(), ["memory", "show", "--config", config], color=True)
    assert shown.exit_code == 0, shown.output
    assert "Likes ]0;pwnedtea[2J." in shown.stdout and "\x07" not in shown.stdout, repr(shown.stdout)
