"""Item 7: importers copy only plain files that live inside the source, privately.

A hostile OpenClaw folder points its MEMORY.md, a daily note, a session and skill files at the
config file (symbolic and hard links), and holds a FIFO where SOUL.md should be. Through the
real CLI (``lucid import openclaw``): nothing of the config reaches the workspace or its git
history, each refusal is reported, and what is imported is 0600 (folders 0700).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from lucidgate.gateway.cli import build_app

LEAK = "sk-LEAK-0123456789"


def _hostile_source(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "lucid-config.json"
    secret.write_text(json.dumps({"providers": {"openai": {"apiKey": LEAK}}}))
    src = tmp_path / "openclaw"
    ws = src / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").symlink_to(secret)
    (ws / "USER.md").write_text("# User\n- plays chess\n")
    os.chmod(ws / "USER.md", 0o644)
    os.mkfifo(ws / "SOUL.md")
    (ws / "memory" / "2026-01-02.md").symlink_to(secret)
    (ws / "memory" / "2026-01-03.md").write_text("- met Ana\n")
    skills = ws / "skills"
    (skills / "linked").mkdir(parents=True)
    (skills / "linked" / "SKILL.md").symlink_to(secret)
    (skills / "hard").mkdir()
    os.link(secret, skills / "hard" / "SKILL.md")
    (skills / "inner").mkdir()
    (skills / "inner" / "SKILL.md").write_text("---\nname: inner\ndescription: x\n---\nbody\n")
    (skills / "inner" / "notes.md").symlink_to(secret)
    (skills / "good").mkdir()
    (skills / "good" / "SKILL.md").write_text("---\nname: good\ndescription: fine\n---\nDo it.\n")
    (skills / "good" / "run.sh").write_text("#!/bin/sh\necho ok\n")
    os.chmod(skills / "good" / "run.sh", 0o755)
    (skills / "outside").symlink_to(tmp_path)  # a whole skill folder elsewhere
    sessions = src / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    line = {"type": "message", "message": {"role": "user", "content": LEAK}}
    (tmp_path / "elsewhere.jsonl").write_text(json.dumps(line) + "\n")
    (sessions / "s1.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    return src, secret


def test_import_openclaw_refuses_links_devices_and_escapes(tmp_path: Path, workspace: Path) -> None:
    src, _ = _hostile_source(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    result = CliRunner().invoke(build_app(), ["import", "openclaw", str(src), "--config", str(config)])
    assert result.exit_code == 0, result.output
    out = result.output
    for name in ("MEMORY.md", "SOUL.md", "2026-01-02.md", "skills/linked", "skills/hard", "notes.md",
                 "skills/outside", "s1.jsonl"):
        assert name in out and "refused" in out, (name, out)
    for path in workspace.rglob("*"):
        if path.is_file() and not path.is_relative_to(workspace / ".git"):
            assert LEAK not in path.read_text(errors="replace"), path
    history = subprocess.run(["git", "-C", str(workspace), "log", "-p", "--all"], capture_output=True, text=True)
    assert history.returncode == 0, history.stderr  # an empty log from a failed git proves nothing
    assert "plays chess" in history.stdout and LEAK not in history.stdout
    assert "plays chess" in (workspace / "USER.md").read_text()
    good = workspace / "skills" / "good"
    assert (good / "SKILL.md").read_text().endswith("Do it.\n")
    for path in (workspace / "USER.md", good / "SKILL.md", good / "run.sh", workspace / "memory" / "2026-01-03.md"):
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    assert oct(good.stat().st_mode & 0o777) == "0o700"
    assert not (workspace / "skills" / "linked").exists() and not (workspace / "skills" / "hard").exists()
