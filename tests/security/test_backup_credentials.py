"""Item 4: ``lucid backup`` holds no credential of any kind, and a restore logs in again.

The Matrix channel logs in with a password on the real homeserver (Synapse on loopback) and
keeps its access token in ``state/matrix.json``; the workspace also holds the local API token,
a console login link, the webhook's credential records and a state file of a kind nobody
listed. ``lucid backup`` (the real CLI) must contain no byte of any of them in any member of
the archive, while still carrying the memory and transcripts; the token still passes
``whoami`` afterwards (it was a live credential). A gateway started on the restore logs in
with the password and syncs.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lucidgate.channels.matrix import build as build_matrix
from lucidgate.channels.matrix.channel import MatrixChannel
from lucidgate.config.schema import Config
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.console.links import LoginLinks
from lucidgate.gateway.daemon import local_client
from tests.fakes.llm import FakeLLMServer
from tests.matrix_kit import Homeserver
from tests.security._trust1_kit import LUCID, cli_env
from tests.waiting import until

AGENT = {"llmRetries": 0, "llmTimeoutS": 30, "dream": {"enabled": False},
         "memory": {"autoRecall": False, "search": {"enabled": False}}}
PASSWORD = "bot-password-not-in-backups"
ODD_SECRET = "odd-channel-session-0123456789abcdef"


def _matrix(homeserver: Homeserver, user_id: str, owner: str) -> dict[str, Any]:
    return {"enabled": True, "homeserver": homeserver.url, "userId": user_id, "password": PASSWORD,
            "allowFrom": [owner], "owners": [owner], "syncTimeoutS": 5}


async def _login_and_sync(config: Config) -> str:
    """Start a gateway with the Matrix channel until its first sync; the token it logged in with."""
    gw = build_gateway(config)
    gw.add_channel("matrix", build_matrix(config, gw.channel_deps))
    async with gw:
        channel = gw.channel("matrix")
        assert isinstance(channel, MatrixChannel)
        await until(lambda: channel.syncer.synced.is_set(), 60, what="the first sync")
    state = json.loads((config.workspace / "state" / "matrix.json").read_text())
    token = state["access_token"]
    assert isinstance(token, str) and len(token) > 10
    return token


async def _whoami(homeserver: Homeserver, token: str) -> str | None:
    async with httpx.AsyncClient(base_url=homeserver.url, timeout=30) as http:
        answer = await http.get("/_matrix/client/v3/account/whoami", headers={"Authorization": f"Bearer {token}"})
    return answer.json().get("user_id") if answer.status_code == 200 else None


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else b"")  # type: ignore[union-attr]
                for m in tar.getmembers()}


async def test_a_backup_holds_no_channel_session_token_and_a_restore_logs_in_again(
        tmp_path: Path, workspace: Path, homeserver: Homeserver, fake_llm: FakeLLMServer,
        make_config: Callable[..., Config]) -> None:
    bot_person = await homeserver.register(password=PASSWORD)
    owner = await homeserver.register()
    document_matrix = _matrix(homeserver, bot_person.user_id, owner.user_id)
    config = make_config(agents={"defaults": AGENT}, channels={"matrix": document_matrix})
    token = await _login_and_sync(config)
    assert token != bot_person.token  # the channel's own session, made by the password login

    # The rest of the workspace's credentials, each written by the code that writes it.
    local_client.publish(workspace, "http://127.0.0.1:9", "local-api-token-0123456789abcdef")
    link = LoginLinks(workspace).issue(600)
    ledger = workspace / "state" / "webhook_chats.sqlite"
    with sqlite3.connect(ledger) as db:
        db.execute("CREATE TABLE IF NOT EXISTS chat_writers (token_fp TEXT, chat_id TEXT, first_at REAL)")
        db.execute("INSERT INTO chat_writers VALUES ('fp-3b1d0c0ffee', 'c1', 0)")
    (workspace / "state" / "newchannel-session.json").write_text(json.dumps({"session": ODD_SECRET}))
    (workspace / "memory").mkdir(exist_ok=True)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- likes tea\n")
    (workspace / "sessions").mkdir(exist_ok=True)
    (workspace / "sessions" / "matrix_x.jsonl").write_text('{"_type":"metadata","v":1,"key":"matrix:x"}\n')

    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), **AGENT}},
                                       "channels": {"matrix": document_matrix}}))
    archive = tmp_path / "backup.tar.gz"
    made = subprocess.run([*LUCID, "backup", "--config", str(config_file), "--out", str(archive)],
                          env=cli_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "not in it" in made.stdout and "state/" in made.stdout

    members = _members(archive)
    everything = gzip.decompress(archive.read_bytes())
    secrets = {"matrix access token": token, "matrix password": PASSWORD, "local API token":
               "local-api-token-0123456789abcdef", "console link": link, "webhook token record": "fp-3b1d0c0ffee",
               "an unlisted channel session": ODD_SECRET}
    for what, secret in secrets.items():
        for name, data in members.items():
            assert secret.encode() not in data, (what, name)
        assert secret.encode() not in everything, what
    assert not any(name.startswith("workspace/state") for name in members), sorted(members)
    assert members["workspace/memory/MEMORY.md"].endswith(b"likes tea\n")
    assert "workspace/sessions/matrix_x.jsonl" in members
    assert await _whoami(homeserver, token) == bot_person.user_id  # it was a live credential

    target = tmp_path / "restored"
    back = subprocess.run([*LUCID, "restore", str(archive), "--to", str(target)],
                          env=cli_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "log in again" in back.stdout
    restored = json.loads((target / "config.json").read_text())
    restored["channels"]["matrix"]["password"] = PASSWORD  # the owner puts the secret back
    restored["providers"] = {"openai": {"apiBase": fake_llm.base_url, "apiKey": "sk-test"}}
    again = await _login_and_sync(Config.model_validate(restored))
    assert again != token and await _whoami(homeserver, again) == bot_person.user_id
