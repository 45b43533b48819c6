"""``lucid backup`` while the gateway runs, ``lucid restore`` into an empty directory, and
the restored copy is the same assistant: transcripts, memory, its git history (from a bundle),
secrets only when asked; the gateway's state (its stores and channel logins), the index, logs
and locks left out."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lucidgate.memory.naming import session_file_stem
from lucidgate.config import load_config
from lucidgate.gateway.cli import build_app
from lucidgate.gateway.ops.backup import BackupError, create_backup, restore_backup
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.sessions import load_session_file
from lucidgate.gateway.console.links import LoginLinks
from tests.fakes.llm import Reply
from tests.test_webhook import TOKEN, body, serving


@pytest.fixture
def live_setup(tmp_path, make_config, workspace):
    doc = {"agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model"}},
           "providers": {"openai": {"apiKey": "sk-backup-secret-value"}},
           "channels": {"webhook": {"token": TOKEN, "callbackSecret": "cb-secret-0123456789"}},
           "gateway": {"port": 0}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    config = make_config(channels={"webhook": {"token": TOKEN, "callbackSecret": "cb-secret-0123456789"}},
                         gateway={"port": 0})
    return path, config


async def test_backup_while_running_then_restore_round_trip(tmp_path, live_setup, fake_llm, workspace):
    path, config = live_setup
    (workspace / "index").mkdir()
    (workspace / "index" / "vectors.bin").write_bytes(b"rebuildable")
    (workspace / "logs").mkdir()
    (workspace / "logs" / "agent.log").write_text("a log line\n")
    (workspace / ".dream.lock").write_text("")
    LoginLinks(workspace).issue(600)  # a one-time console link: never in a backup
    async with serving(config) as (server, client):
        fake_llm.queue(Reply("first answer"), Reply("second answer"))
        for text in ("remember the tea", "and the biscuits"):
            assert (await client.post("/v1/messages", json=body(text, idempotency_key=text))).status_code == 200
        (workspace / "USER.md").write_text("# User\n- drinks tea\n")
        assert await asyncio.to_thread(server.state.gateway.parts.git.commit, "user: tea") is not None
        # Taken while the gateway runs (its store is open, in WAL mode).
        archive = tmp_path / "out" / "b.tar.gz"
        manifest = await asyncio.to_thread(create_backup, config, path, archive)
        secret_archive = tmp_path / "with-secrets.tar.gz"
        await asyncio.to_thread(create_backup, config, path, secret_archive, include_secrets=True)
    assert oct(archive.stat().st_mode & 0o777) == "0o600"
    assert {"index/", "state/", "logs/", ".dream.lock"} <= set(manifest["not_taken"]), manifest
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert not any(n.startswith(("workspace/index", "workspace/state", "workspace/logs")) for n in names)
    assert not any(n.endswith((".lock", "-wal", "-shm")) for n in names)

    target = tmp_path / "restored"
    restored = restore_backup(archive, target)
    assert restored["secrets"] is False
    new_config = load_config(target / "config.json", {})
    new_ws = new_config.workspace
    assert new_ws == target / "workspace"
    # Secrets are blank unless asked for; everything else is kept.
    assert new_config.providers.openai.api_key.get_secret_value() == ""
    assert new_config.channels.webhook.token.get_secret_value() == ""
    assert new_config.gateway.port == 0
    # Transcripts are the same conversation.
    stem = session_file_stem("webhook:c1")
    before = load_session_file(workspace / "sessions" / f"{stem}.jsonl").messages
    after = load_session_file(new_ws / "sessions" / f"{stem}.jsonl").messages
    assert [m.get("content") for m in after] == [m.get("content") for m in before]
    assert any(m.get("content") == "second answer" for m in after)
    # Memory files and the git history came along; the SQLite store is a consistent copy.
    assert (new_ws / "SOUL.md").read_text() == (workspace / "SOUL.md").read_text()
    assert GitStore(new_ws).log(5) == GitStore(workspace).log(5)
    # State (pairings, owner sessions, jobs, channel logins) is neither archived nor restored.
    assert not (new_ws / "state").exists() and restored["left_out"] == []
    assert all(oct(p.stat().st_mode & 0o077) == "0o0" for p in target.rglob("*"))

    with_secrets = restore_backup(secret_archive, tmp_path / "restored-2")
    assert with_secrets["secrets"] is True
    kept = load_config(tmp_path / "restored-2" / "config.json", {})
    assert kept.providers.openai.api_key.get_secret_value() == "sk-backup-secret-value"


def test_restore_refuses_a_non_empty_directory_and_foreign_archives(tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    archive = tmp_path / "x.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        evil = tmp_path / "evil"
        evil.write_text("x")
        tar.add(evil, arcname="../evil")
        tar.add(evil, arcname="manifest.json")
    with pytest.raises(BackupError, match="not empty"):
        restore_backup(archive, busy)
    assert (busy / "keep.txt").read_text() == "mine"
    with pytest.raises(BackupError, match="unexpected entry"):
        restore_backup(archive, tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists() or not any((tmp_path / "fresh").iterdir())
    (tmp_path / "junk.tar.gz").write_bytes(b"not an archive")
    with pytest.raises(BackupError, match="not a lucid backup"):
        restore_backup(tmp_path / "junk.tar.gz", tmp_path / "fresh2")


def test_the_cli_round_trip(tmp_path, workspace):
    from lucidgate.config.onboard import install_templates

    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}},
                                       "channels": {"webhook": {"token": "t" * 40}}}))
    install_templates(workspace)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- likes tea\n")
    runner = CliRunner()
    out = tmp_path / "b.tar.gz"
    made = runner.invoke(build_app(), ["backup", "--config", str(config_path), "--out", str(out)])
    assert made.exit_code == 0, made.output
    assert "secrets left out" in made.output
    back = runner.invoke(build_app(), ["restore", str(out), "--to", str(tmp_path / "r")])
    assert back.exit_code == 0, back.output
    assert "lucid gateway -c" in back.output and "lucid onboard --webhook-token" in back.output
    assert (tmp_path / "r" / "workspace" / "memory" / "MEMORY.md").read_text().endswith("likes tea\n")
    again = runner.invoke(build_app(), ["restore", str(out), "--to", str(tmp_path / "r")])
    assert again.exit_code == 1 and "not empty" in again.output


def test_what_was_forgotten_stays_forgotten_after_a_restore(tmp_path, make_config, workspace):
    """The tombstones travel with the archive, so the restored history and files still read
    ``[forgotten]``; a tampered tombstone file is refused with a warning, the rest restores."""
    from lucidgate.config.onboard import install_templates
    from lucidgate.memory.tombstones import REDACTED, Tombstones

    install_templates(workspace)
    git = GitStore(workspace)
    git.init()
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- my locker code is 4471-KESTREL\n")
    sha = git.commit("note the locker")
    assert sha is not None
    Tombstones(workspace).add("locker code is 4471-KESTREL", by="owner")
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    archive = tmp_path / "b.tar.gz"
    create_backup(make_config(), config_path, archive)

    restored = tmp_path / "r" / "workspace"
    manifest = restore_backup(archive, tmp_path / "r")
    assert "warnings" not in manifest
    assert [t.digest for t in Tombstones(restored).items()] == [t.digest for t in Tombstones(workspace).items()]
    patch = GitStore(restored).diff(GitStore(restored).log(1)[0].sha)
    assert "4471-KESTREL" not in patch and REDACTED in patch

    tampered = tmp_path / "t.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(tampered, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else b""
            if member.name == "forgotten.json":
                data = b"{not json"
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    manifest = restore_backup(tampered, tmp_path / "r2")
    assert any("forgotten.json left out" in w for w in manifest["warnings"])
    assert (tmp_path / "r2" / "workspace" / "memory" / "MEMORY.md").exists()
    assert not (tmp_path / "r2" / "workspace" / "state" / "forgotten.json").exists()
