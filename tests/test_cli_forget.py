"""``lucid memory forget [--purge]``, ``forgotten`` and ``unforget`` through a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from lucidgate.memory.gitsafe import run_git
from lucidgate.memory.gitstore import GitStore
from tests.fakes.llm import FakeLLMServer
from tests.test_cli_memory import lucid, write_config

FILLER = "".join(f"- project note {i}\n" for i in range(12))


def workspace_history(workspace: Path) -> str:
    done = run_git(["log", "--all", "-p", "--format=%H%n%B"], cwd=workspace, workspace=workspace)
    assert done.returncode == 0, done.stderr
    return done.stdout


def prepare(workspace: Path) -> None:
    (workspace / "memory").mkdir(parents=True)
    (workspace / "USER.md").write_text("# User\n- Name: Ana\n" + FILLER)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- The SAFE code is\n  4711\n")
    git = GitStore(workspace)
    git.init()
    git.commit("manual: the safe code")
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- The safe code is 4711 (still)\n- lamp\n")
    git.commit("agent: noted that the safe code is 4711")


async def test_forget_without_purge_says_the_history_still_holds_it(fake_llm: FakeLLMServer,
                                                                    tmp_path: Path) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare(workspace)
    code, out, err = await lucid("memory", "forget", "safe code is 4711", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "memory/MEMORY.md: 1 line(s)" in out
    assert "history of changes (git) still holds" in out and "--purge" in out
    assert "4711" not in (workspace / "memory" / "MEMORY.md").read_text()
    assert "4711" in workspace_history(workspace)  # said plainly: the old versions are there
    code, out, err = await lucid("memory", "forgotten", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "hashed, 17 characters" in out and "lucid memory forget by" in out
    assert "4711" not in out
    ident = json.loads((workspace / "state" / "forgotten.json").read_text())["items"][0]["id"]
    code, out, err = await lucid("memory", "unforget", ident, "--config", str(config), home=tmp_path)
    assert code == 0 and f"un-forgot {ident}" in out, err
    code, out, _ = await lucid("memory", "forgotten", "--config", str(config), home=tmp_path)
    assert "Nothing has been forgotten." in out


async def test_purge_leaves_no_commit_holding_the_text(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare(workspace)
    (tmp_path / "lucidgate-backup-20260101-000000.tar.gz").write_bytes(b"old archive")
    code, out, err = await lucid("memory", "forget", "--purge", "safe code is 4711", "--config", str(config),
                                 home=tmp_path)
    assert code == 0, err
    assert "History of changes rewritten: 2 of" in out and "no commit holds it now" in out, out
    assert "lucidgate-backup-20260101-000000.tar.gz" in out  # a backup made before still holds it
    assert "history of changes (git) still holds" not in out
    history = workspace_history(workspace)
    assert "4711" not in history and "lamp" in history
    assert "[forgotten]" in history  # the commit message was rewritten too
    log = run_git(["log", "--format=%s"], cwd=workspace, workspace=workspace).stdout
    assert "(asked by lucid memory forget by" in log  # the commit says who asked


async def test_a_short_forget_is_refused_without_yes(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare(workspace)
    code, out, err = await lucid("memory", "forget", "a", "--config", str(config), home=tmp_path)
    assert code == 1 and "shorter than 4 characters" in err and "--yes" in err
    assert "lamp" in (workspace / "memory" / "MEMORY.md").read_text()
