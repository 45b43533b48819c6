"""`lucid agent` (interactive), `lucid memory …`, `lucid dream`, `lucid usage`, `lucid jobs` and
`lucid pairing approve`, each run as a real subprocess against the fake OpenAI server.

The workspace is prepared the way the product leaves it (history lines, cursors, the
owner-session list) and every check looks where a user would: the printed output, the
files, the git log of the memory repository.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from lucidgate.channels.pairing import PairingStore
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls

LUCID = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()"]

SOUL = "# Soul\n\nCalm and brief.\n"
USER = "# User\n\n- Name: Ana\n- Lives in Porto\n"
MEMORY = "# Memory\n\n- Project lucid uses Python 3.11\n"
HISTORY = [
    {"cursor": 1, "timestamp": "2026-01-01 09:00", "content": "- Ana said hello",
     "session_key": "cli:local"},
    {"cursor": 2, "timestamp": "2026-01-01 10:00", "content": "- Ana drinks green tea every morning",
     "session_key": "cli:local"},
    {"cursor": 3, "timestamp": "2026-01-01 10:05", "content": "- Ana prefers short answers",
     "session_key": "cli:local"},
]


async def lucid(*args: str, home: Path, stdin: str | None = None,
                timeout: float = 60) -> tuple[int, str, str]:
    """Run `lucid ARGS` with HOME=home; returns (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    env["HOME"] = str(home)
    env["COLUMNS"] = "200"  # rich tables: no wrapped or truncated cells in the assertions
    proc = await asyncio.create_subprocess_exec(
        *LUCID, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL)
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def write_config(tmp_path: Path, api_base: str) -> tuple[Path, Path]:
    workspace = tmp_path / "ws"
    doc = {"agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                   "llmRetryBaseDelayS": 0.01, "llmRetries": 0}},
           "providers": {"openai": {"apiKey": "sk-test", "apiBase": api_base}}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path, workspace


def prepare_memory(workspace: Path, *, dream_cursor: int | None = None) -> None:
    """Memory files, three history entries and the cursors, as the gateway writes them."""
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    (workspace / "SOUL.md").write_text(SOUL)
    (workspace / "USER.md").write_text(USER)
    (workspace / "memory" / "MEMORY.md").write_text(MEMORY)
    (workspace / "memory" / "history.jsonl").write_text(
        "".join(json.dumps(entry) + "\n" for entry in HISTORY))
    (workspace / "memory" / ".cursor").write_text(f"{HISTORY[-1]['cursor']}\n")
    if dream_cursor is not None:
        (workspace / "memory" / ".dream_cursor").write_text(f"{dream_cursor}\n")
    # The terminal user is the owner: after a `lucid agent` turn the loop has recorded its
    # private session, which is what lets Dream write USER.md from these entries.
    (workspace / "state").mkdir(exist_ok=True)
    (workspace / "state" / "owner_sessions.json").write_text(json.dumps(["cli:local"]))


def messages_of(request: dict) -> list[tuple[str, str]]:
    return [(m.get("role"), m.get("content") if isinstance(m.get("content"), str) else "")
            for m in request["messages"]]


def table_row(out: str, first_cell: str) -> list[str]:
    """The cells of the rich-table row whose first cell is ``first_cell``."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row {first_cell!r} in:\n{out}")


# ----------------------------------------------------------------------------- lucid agent


@pytest.mark.slow
async def test_interactive_agent_answers_keeps_history_and_usage_counts_the_turn(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    fake_llm.queue(Reply("Hello from the fake model", prompt_tokens=1234, completion_tokens=56))

    code, out, err = await lucid("agent", "--config", str(config), home=tmp_path,
                                 stdin="hello\nexit\n")
    assert code == 0, err
    assert "Hello from the fake model" in out
    assert "Traceback" not in err
    assert len(fake_llm.requests) == 1  # one turn, one call: no stray consolidation/titles
    assert fake_llm.last_user_text().endswith("\nhello")  # after the runtime-context header

    # (e) the turn's tokens are in the ledger, per day, per job and for the terminal session.
    code, out, err = await lucid("usage", "--days", "1", "--config", str(config), home=tmp_path)
    assert code == 0, err
    session = table_row(out, "cli:local")
    assert session[1:4] == ["1", "1,234", "56"], out
    assert table_row(out, "turn")[1:4] == ["1", "1,234", "56"], out

    # A second interactive run continues the same conversation.
    fake_llm.queue(Reply("You said hello"))
    code, out, err = await lucid("agent", "--config", str(config), home=tmp_path,
                                 stdin="what did I say?\nexit\n")
    assert code == 0, err
    assert "You said hello" in out
    second = messages_of(fake_llm.requests[-1])
    first_user = next(i for i, (role, text) in enumerate(second)
                      if role == "user" and text.endswith("hello"))
    first_answer = second.index(("assistant", "Hello from the fake model"))
    assert first_user < first_answer < len(second) - 1
    assert second[-1][0] == "user" and second[-1][1].endswith("\nwhat did I say?")
    assert len(list((workspace / "sessions").glob("cli_*.jsonl"))) == 1


async def test_usage_tables_count_the_same_calls(tmp_path: Path) -> None:
    """The by-day and cost tables are counts of one read of the journal: a line the cost
    reader once skipped (no model named: 3 calls by day, 2 in the cost table) is in both."""
    from datetime import UTC, datetime

    config, workspace = write_config(tmp_path, "http://127.0.0.1:9/v1")
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    (workspace / "usage").mkdir(parents=True)
    line = {"ts": f"{day}T09:00:00+00:00", "job": "turn", "session": "cli:local", "model": "openai/fake-model",
            "prompt": 100, "completion": 10, "cached": 0}
    no_model = {k: v for k, v in line.items() if k != "model"}
    (workspace / "usage" / f"{day}.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in (line, line, no_model)) + "not json\n")
    code, out, err = await lucid("usage", "--days", "1", "--config", str(config), home=tmp_path)
    assert code == 0, err
    rows = [cells for cells in ([c.strip() for c in ln.strip().strip("│").split("│")] for ln in out.splitlines())
            if cells[0] == day]
    assert [cells[1] for cells in rows] == ["3", "3"], out  # by day, then cost


@pytest.mark.slow
async def test_interactive_agent_leaves_cleanly_on_end_of_input(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Ctrl-D (stdin closed) without 'exit' is a normal goodbye, not a crash."""
    config, _ = write_config(tmp_path, fake_llm.base_url)
    fake_llm.queue(Reply("Only answer"))
    code, out, err = await lucid("agent", "--config", str(config), home=tmp_path, stdin="hi\n\n")
    assert code == 0, err
    assert "Only answer" in out
    assert len(fake_llm.requests) == 1  # the empty line is not sent to the model
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- lucid memory show


async def test_memory_show_prints_the_files_and_the_unprocessed_count(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare_memory(workspace, dream_cursor=1)
    code, out, err = await lucid("memory", "show", "--config", str(config), home=tmp_path)
    assert code == 0, err
    for label, text in (("SOUL.md", SOUL), ("USER.md", USER), ("memory/MEMORY.md", MEMORY)):
        assert label in out
        for line in text.strip().splitlines():
            assert line in out
    assert out.index("Calm and brief.") < out.index("- Lives in Porto") < out.index("Python 3.11")
    # Three entries, Dream has processed #1: two are waiting.
    assert "2 history entries not yet processed by Dream" in out
    assert fake_llm.requests == []


# ----------------------------------------------------------------------------- lucid dream


@pytest.mark.slow
async def test_dream_dry_run_prints_findings_and_changes_nothing(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare_memory(workspace, dream_cursor=0)
    watched = ["SOUL.md", "USER.md", "memory/MEMORY.md", "memory/history.jsonl", "memory/.cursor",
               "memory/.dream_cursor"]
    before = {rel: (workspace / rel).read_bytes() for rel in watched}
    cursor_stat = (workspace / "memory" / ".dream_cursor").stat()
    fake_llm.queue(Reply("[USER] likes tea\n[MEMORY] Ana prefers short answers\n"))

    code, out, err = await lucid("dream", "--dry-run", "--config", str(config), home=tmp_path)

    assert code == 0, err
    assert "dry run" in out and "#1" in out and "#3" in out
    assert "[USER] likes tea" in out
    assert "[MEMORY] Ana prefers short answers" in out
    assert len(fake_llm.requests) == 1  # phase 1 only: no editing phase
    assert "tools" not in fake_llm.requests[0]
    phase1 = fake_llm.last_user_text()
    assert "Ana drinks green tea every morning" in phase1 and "- Lives in Porto" in phase1
    assert {rel: (workspace / rel).read_bytes() for rel in watched} == before
    after = (workspace / "memory" / ".dream_cursor").stat()
    assert (after.st_ino, after.st_mtime_ns) == (cursor_stat.st_ino, cursor_stat.st_mtime_ns)
    assert not any(m.startswith("dream:") for m in _git_messages(workspace))


def _git_messages(workspace: Path) -> list[str]:
    from lucidgate.memory.gitstore import GitStore

    return [c.message for c in GitStore(workspace).log(50)]


@pytest.mark.slow
async def test_dream_edits_user_md_then_log_diff_and_restore_undo_it(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare_memory(workspace)
    fake_llm.queue(
        Reply("[USER] likes tea\n"),
        ToolCalls([("edit_file", {"path": "USER.md", "old_text": "- Lives in Porto\n",
                                  "new_text": "- Lives in Porto\n- Likes tea\n"})]),
        Reply("Applied one finding."),
    )

    code, out, err = await lucid("dream", "--config", str(config), home=tmp_path)

    assert code == 0, err + out
    assert "1 finding(s), 1 change(s)" in out and "edited USER.md" in out
    dreamed = USER.replace("- Lives in Porto\n", "- Lives in Porto\n- Likes tea\n")
    assert (workspace / "USER.md").read_text() == dreamed
    assert (workspace / "memory" / ".dream_cursor").read_text().strip() == "3"
    assert len(fake_llm.requests) == 3
    phase2 = fake_llm.requests[1]
    assert {t["function"]["name"] for t in phase2["tools"]} == {"read_file", "edit_file", "write_file"}
    assert "[USER] likes tea" in fake_llm.last_user_text(phase2)
    tool_results = [m["content"] for m in fake_llm.requests[2]["messages"] if m["role"] == "tool"]
    assert tool_results and tool_results[0].startswith("OK: edited USER.md")
    printed = re.search(r"Commit ([0-9a-f]{8})", out)
    assert printed, out

    # `lucid jobs` shows this run as Dream's last one, not "never ran".
    code, jobs_out, err = await lucid("jobs", "--config", str(config), home=tmp_path)
    assert code == 0, err
    dream_row = table_row(jobs_out, "dream")
    assert dream_row[3] != "—" and "1 change(s)" in dream_row[4] and "lucid dream" in dream_row[4], jobs_out

    code, out, err = await lucid("memory", "log", "--config", str(config), home=tmp_path)
    assert code == 0, err
    dream_lines = [line for line in out.splitlines() if "dream:" in line]
    assert len(dream_lines) == 1, out
    row = [c.strip() for c in dream_lines[0].strip().strip("│").split("│")]
    sha = row[0]
    assert re.fullmatch(r"[0-9a-f]{7,}", sha) and printed.group(1).startswith(sha)
    assert "1 change(s)" in row[2] and row[3] == "USER.md"
    assert "init: memory files" in out

    code, out, err = await lucid("memory", "diff", sha, "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "USER.md" in out and "+- Likes tea" in out
    assert "-- Lives in Porto" not in out  # a surgical edit, not a rewrite

    code, out, err = await lucid("memory", "restore", sha, "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert f"restored to before {sha}" in out
    assert (workspace / "USER.md").read_text() == USER
    assert _git_messages(workspace)[0].startswith(f"restore: before {sha}")

    # Undoing twice is refused with a message, not a traceback.
    code, out, err = await lucid("memory", "restore", sha, "--config", str(config), home=tmp_path)
    assert code == 1
    assert "nothing to restore" in err and "Traceback" not in err
    # A "sha" shaped like a git option never reaches git.
    sneaky = tmp_path / "leak.txt"
    code, out, err = await lucid("memory", "diff", "--config", str(config), "--",
                                 f"--output={sneaky}", home=tmp_path)
    assert code == 1 and "is not a commit id" in err
    assert not sneaky.exists() and "Traceback" not in err


# ----------------------------------------------------------------------------- jobs and pairing


async def test_jobs_on_a_fresh_workspace(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config, _ = write_config(tmp_path, fake_llm.base_url)
    code, out, err = await lucid("jobs", "--config", str(config), home=tmp_path)
    assert code == 0, err
    dream = table_row(out, "dream")
    assert dream[1] == "every 2 h" and dream[4] == "never ran", out
    heartbeat = table_row(out, "heartbeat")
    assert heartbeat[1] == "off" and heartbeat[4] == "never ran", out
    assert "no active reminders" in out
    assert "Traceback" not in err and fake_llm.requests == []


async def test_pairing_approve_rejects_a_bad_code_and_accepts_a_real_one(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    code, out, err = await lucid("pairing", "approve", "BADCODE", "--config", str(config),
                                 home=tmp_path)
    assert code == 1
    assert "unknown, used or expired code" in err
    assert "Traceback" not in err and "approved" not in out

    issued = PairingStore(workspace / "state" / "pairing.json").issue("telegram", "4242")
    typed = issued.lower()[:4] + "-" + issued.lower()[4:]  # typed by hand: case and dashes ignored
    code, out, err = await lucid("pairing", "approve", typed, "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "approved telegram user 4242" in out
    # Single use: the same code does not work twice.
    code, out, err = await lucid("pairing", "approve", issued, "--config", str(config), home=tmp_path)
    assert code == 1 and "unknown, used or expired code" in err
