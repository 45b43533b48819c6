"""Item 2: importing or restoring an archive runs nothing from it, and no git call we make
runs a repository's own commands.

A hostile ``lucid export`` archive carries ``workspace/.git`` whose config names an fsmonitor,
a pager, a hooks path, a clean filter and a textconv, plus a ``post-commit`` hook, and a
``workspace/state/`` that would approve a stranger. Through the real CLI (``lucid import
lucid``, ``lucid memory log``/``show``, ``lucid restore``) and GitStore commits, no marker
appears; the memory history comes from the archive's verified bundle or starts fresh.
The same holds for a workspace whose ``.git`` someone else's archive already put there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

from typer.testing import CliRunner

from lucidgate.gateway.cli import build_app
from lucidgate.memory.gitstore import GitStore


def run(args: list[str]) -> str:
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    return result.output


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x",
           "GIT_COMMITTER_EMAIL": "x@x"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def poison(workspace: Path, marks: Path) -> None:
    """Make ``workspace/.git`` a repository whose config and hooks run commands."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "SOUL.md").write_text("# Soul\n")
    _git(workspace, "init", "-q", "-b", "main")
    _git(workspace, "add", "SOUL.md")
    _git(workspace, "commit", "-q", "-m", "theirs")
    hook = workspace / ".git" / "hooks" / "post-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marks}/hook\n")
    hook.chmod(0o755)
    def touch(name: str) -> str:
        return f"sh -c 'touch {marks}/{name}; cat'"
    with (workspace / ".git" / "config").open("a") as fh:
        fh.write(f"[core]\n\tfsmonitor = \"{touch('fsmonitor')}\"\n\tpager = \"{touch('pager')}\"\n"
                 f"\thooksPath = {workspace / '.git' / 'hooks'}\n"
                 f"[filter \"evil\"]\n\tclean = \"{touch('filter')}\"\n\tsmudge = \"{touch('smudge')}\"\n"
                 f"[diff \"evil\"]\n\ttextconv = \"{touch('textconv')}\"\n[diff]\n\texternal = \"{touch('extdiff')}\"\n")
    (workspace / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (workspace / ".git" / "info").mkdir(exist_ok=True)
    (workspace / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil\n")


def test_control_the_poisoned_repository_fires_under_plain_git(tmp_path: Path) -> None:
    """Without this, "no marker appeared" could mean the poison never worked: under plain git
    the same repository runs its fsmonitor, clean filter, hook and textconv."""
    marks = tmp_path / "marks"
    marks.mkdir()
    workspace = tmp_path / "plain" / "workspace"
    poison(workspace, marks)
    assert sorted(p.name for p in marks.iterdir()) == []
    (workspace / "SOUL.md").write_text("# Soul\n- changed by hand\n")
    subprocess.run(["git", "status"], cwd=workspace, check=True, capture_output=True)
    _git(workspace, "add", "SOUL.md")
    _git(workspace, "commit", "-q", "-m", "plain git")
    subprocess.run(["git", "log", "-p", "-1"], cwd=workspace, check=True, capture_output=True)
    assert {"fsmonitor", "filter", "hook", "textconv"} <= {p.name for p in marks.iterdir()}


def hostile_archive(tmp_path: Path, marks: Path) -> Path:
    staged = tmp_path / "staged" / "workspace"
    poison(staged, marks)
    (staged / "state").mkdir()
    (staged / "state" / "pairing.json").write_text(json.dumps({"approved": {"telegram": ["666"]}}))
    (staged / "state" / "owner_sessions.json").write_text(json.dumps(["telegram:666"]))
    archive = tmp_path / "hostile.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        manifest = json.dumps({"format": "lucidgate-export", "version": 1}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        tar.add(staged, arcname="workspace")
        bogus = b"# v2 git bundle\nnot really a bundle\n"
        info = tarfile.TarInfo("memory.bundle")
        info.size = len(bogus)
        tar.addfile(info, io.BytesIO(bogus))
    return archive


def machine(tmp_path: Path, name: str) -> tuple[Path, Path]:
    workspace = tmp_path / name / "workspace"
    config = tmp_path / name / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    run(["onboard", "-c", str(config)])
    return workspace, config


def test_importing_a_hostile_archive_runs_nothing(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    archive = hostile_archive(tmp_path, marks)
    workspace, config = machine(tmp_path, "b")
    out = run(["import", "lucid", str(archive), "-c", str(config)])
    assert "bundle" in out  # says the history could not be verified and starts fresh
    (workspace / "SOUL.md").write_text("# Soul\n- changed after the import\n")
    run(["memory", "log", "-c", str(config)])
    GitStore(workspace).commit("after import")
    sha = GitStore(workspace).log(1)[0].sha
    run(["memory", "diff", sha, "-c", str(config)])
    assert sorted(p.name for p in marks.iterdir()) == []
    assert not (workspace / "state" / "pairing.json").exists()
    assert not (workspace / "state" / "owner_sessions.json").exists()
    assert "fsmonitor" not in (workspace / ".git" / "config").read_text()
    assert [c.message for c in GitStore(workspace).log(5)][-1] != "theirs"


def test_a_workspace_whose_git_someone_else_made_runs_nothing(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    workspace, config = machine(tmp_path, "c")
    poison(workspace, marks)
    (workspace / "USER.md").write_text("# User\n- new fact\n")
    run(["memory", "log", "-c", str(config)])  # commits the hand edit
    assert sorted(p.name for p in marks.iterdir()) == []
    store = GitStore(workspace)
    (workspace / "SOUL.md").write_text("# Soul\n- tone: warm\n")
    sha = store.commit("soul edit")
    assert sha is not None
    assert "tone: warm" in store.diff(sha)
    store.restore(sha)
    assert sorted(p.name for p in marks.iterdir()) == []


def test_restore_rebuilds_history_from_the_bundle_and_skips_git_and_state(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    workspace, config = machine(tmp_path, "a")
    GitStore(workspace).init()
    (workspace / "SOUL.md").write_text("# Soul\n- tone: dry\n")
    assert GitStore(workspace).commit("soul: dry") is not None
    (workspace / "state").mkdir(exist_ok=True)
    (workspace / "state" / "pairing.json").write_text(json.dumps({"approved": {"telegram": ["666"]}}))
    out = tmp_path / "b.tar.gz"
    run(["backup", "--config", str(config), "--out", str(out)])
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert "memory.bundle" in names and not any(n.startswith(("workspace/.git/", "workspace/state")) for n in names)
    # Someone slips a poisoned repository and state into the archive.
    staged = tmp_path / "poisoned" / "workspace"
    poison(staged, marks)
    (staged / "state").mkdir()
    (staged / "state" / "pairing.json").write_text(json.dumps({"approved": {"telegram": ["666"]}}))
    hostile = tmp_path / "hostile-backup.tar.gz"
    with tarfile.open(out) as src, tarfile.open(hostile, "w:gz") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        dst.add(staged / ".git", arcname="workspace/.git")
        dst.add(staged / "state", arcname="workspace/state")
    restored_out = run(["restore", str(hostile), "--to", str(tmp_path / "r")])
    assert "left out workspace/.git/" in restored_out and "left out workspace/state/" in restored_out, restored_out
    restored = tmp_path / "r" / "workspace"
    assert not (restored / "state").exists()
    log = GitStore(restored).log(5)
    assert [c.message for c in log][:1] == ["soul: dry"]
    GitStore(restored).commit("after restore")
    assert sorted(p.name for p in marks.iterdir()) == []
    assert "fsmonitor" not in (restored / ".git" / "config").read_text()
