"""`lucid export --out FILE` then `lucid import lucid FILE` on another "machine" (another
HOME, another workspace): everything comes back, secrets do not travel."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from typer.testing import CliRunner

from lucidgate.gateway.cli import build_app
from lucidgate.memory.gitstore import GitStore
from tests.test_import import make_nanobot, tree

SECRET = "sk-very-secret-key"


def run(args: list[str]) -> str:
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    return result.output


def machine(tmp_path: Path, name: str) -> tuple[Path, Path]:
    workspace = tmp_path / name / "workspace"
    config = tmp_path / name / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace)}},
        "providers": {"openai": {"apiKey": SECRET, "extraHeaders": {"Authorization": "Bearer hdr-secret"}}},
        "channels": {"telegram": {"token": "tg-secret", "allowFrom": ["1"]}, "webhook": {"token": "wh-secret"}},
        "tools": {"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp-secret"}}}},
    }))
    run(["onboard", "-c", str(config)])
    return workspace, config


def test_export_and_import_round_trip(tmp_path: Path) -> None:
    ws_a, config_a = machine(tmp_path, "a")
    run(["import", "nanobot", str(make_nanobot(tmp_path / "nb")), "-c", str(config_a)])
    (ws_a / "memory" / "2026-05-01.md").write_text("- a daily note\n")
    (ws_a / "memory" / "archive").mkdir(exist_ok=True)
    (ws_a / "memory" / "archive" / "history-0001.jsonl").write_text('{"cursor": 0, "content": "old"}\n')
    GitStore(ws_a).commit_manual_edits()
    archive = tmp_path / "assistant.tar.gz"
    run(["export", "--out", str(archive), "-c", str(config_a)])

    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        exported_config = json.loads(tar.extractfile("config.json").read())  # type: ignore[union-attr]
    assert {"manifest.json", "memory.bundle", "workspace/memory/history.jsonl",
            "workspace/sessions/telegram_4242.jsonl", "workspace/skills/weekly-review/SKILL.md",
            "workspace/memory/archive/history-0001.jsonl", "workspace/memory/2026-05-01.md"} <= names
    text = json.dumps(exported_config)
    for secret in (SECRET, "hdr-secret", "tg-secret", "wh-secret", "ghp-secret"):
        assert secret not in text
    assert exported_config["channels"]["telegram"]["allowFrom"] == ["1"]

    ws_b, config_b = machine(tmp_path, "b")
    assert "would restore" in run(["import", "lucid", str(archive), "--dry-run", "-c", str(config_b)])
    run(["import", "lucid", str(archive), "-c", str(config_b)])
    a, b = tree(ws_a), tree(ws_b)
    for rel in ("SOUL.md", "USER.md", "memory/MEMORY.md", "memory/history.jsonl", "memory/.dream_cursor",
                "memory/2026-05-01.md", "memory/archive/history-0001.jsonl", "sessions/telegram_4242.jsonl",
                "skills/weekly-review/SKILL.md"):
        assert b[rel] == a[rel], rel
    assert [c.message for c in GitStore(ws_b).log(20)] == [c.message for c in GitStore(ws_a).log(20)]
    assert run(["memory", "log", "-c", str(config_b)]).count("import:") >= 1

    # Importing the same archive into a workspace that now has a life: merged, nothing duplicated.
    before = tree(ws_b)
    again = run(["import", "lucid", str(archive), "-c", str(config_b)])
    assert "nothing to import" in again and tree(ws_b) == before


def test_a_file_that_is_not_an_export_is_refused(tmp_path: Path) -> None:
    ws, config = machine(tmp_path, "c")
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_bytes(b"not a tarball")
    result = CliRunner().invoke(build_app(), ["import", "lucid", str(bogus), "-c", str(config)])
    assert result.exit_code == 1 and "not a readable lucid export" in result.output
    assert not (ws / "memory" / "history.jsonl").exists()
