"""Item 5: secrets out of exec's reach.

The real ``lucid gateway`` process, its provider key given only in the environment, exec
with no sandbox (as where bubblewrap is missing): the instruction-following fake model runs
``tr '\\0' '\\n' < /proc/$PPID/environ`` — the key is not there, nor in the gateway's own
``/proc/<pid>/environ``, yet litellm still sends it. The start-up says loudly that exec is
unsandboxed. With bubblewrap, exec cannot read the config file's folder nor write outside
the workspace, even when the config lives outside the home and /tmp.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from lucidgate.config import load_config
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.builtin import builtin_tools
from tests.fakes.context import make_ctx
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_shutdown import GatewayProcess, _env

KEY = "sk-env-only-0123456789abcdef"
OWNER_TOKEN = "owner-token-abcdefghijklmnop"


def tool_results(fake: FakeLLMServer) -> list[str]:
    return [m["content"] for r in fake.requests for m in r["messages"] if m.get("role") == "tool"]


async def test_the_gateway_keeps_no_secret_in_its_environment(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    workspace = tmp_path / "workspace"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model", "llmTimeoutS": 20}},
        "providers": {"openai": {"apiBase": fake_llm.base_url}},
        "channels": {"webhook": {"token": "integration-token-0123456789", "ownerToken": OWNER_TOKEN,
                                 "owners": ["boss"]}},
        "tools": {"exec": {"sandbox": "off"}},
        "gateway": {"port": 0, "shutdownGraceS": 1}}))
    env = _env(tmp_path / "home", LUCIDGATE_PROVIDERS__OPENAI__API_KEY=KEY, SOME_SERVICE_TOKEN="tok-extra-42")
    (tmp_path / "home").mkdir()
    fake_llm.queue(ToolCalls([("exec", {"command": "tr '\\0' '\\n' < /proc/$PPID/environ; env"})]),
                   Reply("looked"))
    proc = await GatewayProcess(config, env).start()
    try:
        url = await proc.url()
        assert proc.proc is not None
        own = Path(f"/proc/{proc.proc.pid}/environ").read_bytes()
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            r = await client.post("/v1/messages", json={"chat_id": "o", "sender_id": "boss", "text": "look"},
                                  headers={"Authorization": f"Bearer {OWNER_TOKEN}"})
        assert r.status_code == 200 and r.json()["reply"] == "looked", r.text
    finally:
        await proc.stop()
    assert KEY.encode() not in own and b"tok-extra-42" not in own
    assert b"LUCIDGATE_PROVIDERS__OPENAI__API_KEY" not in own
    [result] = tool_results(fake_llm)
    assert "PATH=" in result  # the command ran and printed the environment
    assert KEY not in result and "tok-extra-42" not in result
    assert fake_llm.headers[0]["authorization"] == f"Bearer {KEY}"  # litellm still had the key
    assert proc.output.count("WITHOUT a sandbox") == 1, proc.output  # loud, and once


@pytest.mark.needs("bwrap")  # skips without it, fails under LUCID_REQUIRE_REAL=1
async def test_with_bubblewrap_exec_reads_no_config_and_writes_only_the_workspace(tmp_path: Path) -> None:
    folder = Path("/var/tmp") / f"lucid-config-{uuid.uuid4().hex[:8]}"  # outside /home and /tmp
    folder.mkdir()
    try:
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        path = folder / "config.json"
        path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}},
                                    "providers": {"openai": {"apiKey": KEY}},
                                    "tools": {"exec": {"sandbox": "bwrap"}}}))
        config = load_config(path, {})
        registry = ToolRegistry(builtin_tools(config))
        outside = folder.with_name(folder.name + "-written-from-exec")
        out = await registry.execute(make_ctx(workspace), "exec", json.dumps({"command": (
            f"cat {path} 2>&1 || echo config-hidden; ls {folder} | wc -l; "
            f"touch {outside} 2>&1 || echo outside-read-only; echo ok > inside.txt")}))
        assert KEY not in out and "config-hidden" in out and "outside-read-only" in out, out
        assert not outside.exists() and (workspace / "inside.txt").read_text() == "ok\n"
    finally:
        shutil.rmtree(folder)
        folder.with_name(folder.name + "-written-from-exec").unlink(missing_ok=True)


@pytest.mark.needs("bwrap")  # skips without it, fails under LUCID_REQUIRE_REAL=1
async def test_sandboxed_exec_cannot_rewrite_owner_only_paths(tmp_path: Path) -> None:
    """Even the owner's own command (an approved one included) cannot rewrite SOUL.md, skills,
    git control files or the gateway's state unseen: they are read-only inside the sandbox,
    while the owner's notes and the rest of the workspace stay writable."""
    workspace = tmp_path / "workspace"
    (workspace / "skills" / "tea").mkdir(parents=True)
    (workspace / "skills" / "tea" / "SKILL.md").write_text("brew")
    (workspace / "memory" / "deep").mkdir(parents=True)
    (workspace / "state").mkdir()
    (workspace / "state" / "pairing.json").write_text("{}")
    for name, text in (("SOUL.md", "calm"), ("AGENTS.md", "rules"), ("memory/MEMORY.md", "- tea"),
                       ("memory/deep/.gitattributes", "# none"), ("memory/index.sqlite", "db")):
        (workspace / name).write_text(text)
    config = load_config(_config_file(tmp_path, workspace), {})
    registry = ToolRegistry(builtin_tools(config))
    attempts = ["SOUL.md", "AGENTS.md", "skills/tea/SKILL.md", "memory/deep/.gitattributes",
                "memory/index.sqlite", "state/pairing.json"]
    command = "; ".join(f"(echo pwned > {p}) 2>/dev/null || echo refused:{p}" for p in attempts)
    command += "; touch skills/evil 2>/dev/null || echo refused:new-skill"
    command += "; echo '- green tea' >> memory/MEMORY.md && echo ok > scratch.txt && echo wrote-notes"
    out = await registry.execute(make_ctx(workspace), "exec", json.dumps({"command": command}))
    for path in attempts:
        assert f"refused:{path}" in out, out
    assert "refused:new-skill" in out and "wrote-notes" in out, out
    assert (workspace / "SOUL.md").read_text() == "calm" and (workspace / "skills" / "tea" / "SKILL.md").read_text() == "brew"
    assert not (workspace / "skills" / "evil").exists()
    assert (workspace / "memory" / "MEMORY.md").read_text() == "- tea- green tea\n"  # the owner's notes
    assert (workspace / "scratch.txt").read_text() == "ok\n"


def _config_file(tmp_path: Path, workspace: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}},
                                "tools": {"exec": {"sandbox": "bwrap"}}}))
    return path
