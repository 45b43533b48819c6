"""``lucid doctor`` explains every broken setup the tests can make, with the fix, and exits 1:
the model server down, a Telegram token the (loopback) Bot API refuses, a workspace it
cannot write, the port taken by another program, a misspelt config key."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from lucidgate.config.onboard import install_templates
from lucidgate.gateway.ops.doctor import as_json, render, run_checks
from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram_api import TOKEN as TG_TOKEN
from tests.fakes.telegram_api import FakeTelegramAPI

STRONG = "doctor-token-0123456789abcdefghijklmnop"


def write_setup(tmp_path: Path, api_base: str, **sections: Any) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    install_templates(workspace)
    doc: dict[str, Any] = {
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                "contextWindowTokens": 32768}},
        "providers": {"openai": {"apiKey": "sk-doctor", "apiBase": api_base}},
        "channels": {"webhook": {"token": STRONG}},
        "gateway": {"port": 0},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path


def by_name(results: list[Any]) -> dict[str, Any]:
    return {r.name: r for r in results}


async def test_a_healthy_setup_is_all_green(tmp_path, fake_llm):
    async with FakeTelegramAPI() as tg:
        path = write_setup(tmp_path, fake_llm.base_url,
                           channels={"webhook": {"token": STRONG},
                                     "telegram": {"enabled": True, "token": TG_TOKEN, "apiBase": tg.base_url}})
        results = await run_checks(path, {})
    checks = by_name(results)
    assert all(r.ok for r in results), render(results)
    assert {"config", "workspace", "secrets", "git", "model", "context window", "telegram", "webhook token",
            "port", "disk", "outbox", "scheduler store", "exec sandbox", "clock"} <= set(checks)
    assert "answered" in checks["model"].detail and "@lucid_test_bot" in checks["telegram"].detail
    assert len(fake_llm.requests) == 1  # one tiny request, no retries
    assert as_json(results)["ok"] is True


async def test_the_model_server_down_is_named_with_the_fix(tmp_path):
    server = FakeLLMServer()
    await server.start()
    base = server.base_url
    await server.stop()  # nothing listens there any more
    results = await run_checks(write_setup(tmp_path, base), {})
    model = by_name(results)["model"]
    assert model.state == "fail" and base in model.detail
    assert "model server runs" in model.fix and "apiBase" in model.fix
    assert "✗ model" in render(results) and "fix:" in render(results)


async def test_a_bad_telegram_token_is_refused_by_getme(tmp_path, fake_llm):
    async with FakeTelegramAPI() as tg:
        path = write_setup(tmp_path, fake_llm.base_url,
                           channels={"webhook": {"token": STRONG}, "telegram": {
                               "enabled": True, "token": "123456789:AAH-wrong-token-xxxxxxxxxxxxxxxxxxxx",
                               "apiBase": tg.base_url}})
        results = await run_checks(path, {})
        assert tg.calls == []  # the fake counts only accepted calls: the token was refused
    telegram = by_name(results)["telegram"]
    assert telegram.state == "fail" and "getMe refused the token" in telegram.detail
    assert "@BotFather" in telegram.fix
    assert TG_TOKEN not in render(results) and "wrong-token" not in render(results)


async def test_the_port_held_by_another_program(tmp_path, fake_llm):
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        results = await run_checks(write_setup(tmp_path, fake_llm.base_url, gateway={"port": port}), {})
    finally:
        blocker.close()
    check = by_name(results)["port"]
    assert check.state == "fail" and f"127.0.0.1:{port} is in use by another program" in check.detail
    assert "gateway.port" in check.fix


async def test_a_misspelt_key_in_the_file_and_in_the_environment(tmp_path, fake_llm):
    path = write_setup(tmp_path, fake_llm.base_url, gateway={"prot": 8080})
    results = await run_checks(path, {})
    assert [r.name for r in results] == ["config"]
    assert results[0].state == "fail" and "gateway.prot" in results[0].detail
    assert "did you mean 'port'" in results[0].detail
    (tmp_path / "second").mkdir()
    good = write_setup(tmp_path / "second", fake_llm.base_url)
    env = {"LUCIDGATE_GATEWAY__PROT": "8080"}
    results = await run_checks(good, env)
    assert "LUCIDGATE_GATEWAY__PROT" in results[0].detail and "did you mean LUCIDGATE_GATEWAY__PORT" in results[0].detail


async def test_weak_token_open_permissions_and_sources_are_reported(tmp_path, fake_llm):
    path = write_setup(tmp_path, fake_llm.base_url, channels={"webhook": {"token": "short"}})
    path.chmod(0o644)
    (tmp_path / "ws").chmod(0o755)
    results = await run_checks(path, {"LUCIDGATE_AGENTS__DEFAULTS__TIMEZONE": "Europe/Paris"})
    checks = by_name(results)
    assert checks["webhook token"].state == "fail" and "lucid onboard --webhook-token" in checks["webhook token"].fix
    assert checks["secrets"].state == "fail" and f"chmod 600 {path}" == checks["secrets"].fix
    assert checks["workspace"].state == "fail" and "chmod 700" in checks["workspace"].fix
    assert "LUCIDGATE_AGENTS__DEFAULTS__TIMEZONE" in checks["config"].detail and str(path) in checks["config"].detail
    assert "Europe/Paris" in checks["clock"].detail


def _unprivileged() -> list[str]:
    """Root ignores file permissions; drop the capabilities that let it (util-linux setpriv)."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


async def _lucid(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *_unprivileged(), sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_an_unwritable_workspace_from_the_command_line_with_json(tmp_path, fake_llm):
    path = write_setup(tmp_path, fake_llm.base_url)
    workspace = tmp_path / "ws"
    workspace.chmod(0o500)  # r-x: readable, not writable
    try:
        code, out, err = await _lucid("doctor", "--config", str(path), "--json")
        text_code, text, _ = await _lucid("doctor", "--config", str(path))
    finally:
        workspace.chmod(0o700)
    assert code == 1 and text_code == 1, err
    report = json.loads(out)
    assert report["ok"] is False
    check = next(c for c in report["checks"] if c["name"] == "workspace")
    assert check["state"] == "fail" and "cannot be written" in check["detail"] and "chown" in check["fix"]
    assert next(c for c in report["checks"] if c["name"] == "model")["ok"] is True
    assert "✗ workspace" in text and "1 problem(s) found" in text and "Traceback" not in text + err


async def test_mcp_servers_and_the_recall_index_are_checked(tmp_path, fake_llm):
    time_server = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    missing = {"command": str(tmp_path / "no-such-server")}
    path = write_setup(tmp_path, fake_llm.base_url,
                       tools={"mcpServers": {"time": time_server, "gone": missing}})
    index = tmp_path / "ws" / "memory" / "index.sqlite"
    index.parent.mkdir(exist_ok=True)
    index.write_bytes(b"this is not a database" * 100)
    checks = by_name(await run_checks(path, {}))
    assert checks["mcp time"].ok and "tool(s)" in checks["mcp time"].detail
    assert not checks["mcp gone"].ok and "tools.mcpServers.gone" in checks["mcp gone"].fix
    assert checks["recall index"].state == "warn" and "lucid memory reindex" in checks["recall index"].fix
    assert checks["outbox"].ok


@pytest.mark.slow
async def test_doctor_with_the_model_down_prints_its_list_first_and_names_a_refused_connection(tmp_path):
    server = FakeLLMServer()
    await server.start()
    base = server.base_url
    await server.stop()  # nothing listens there any more
    code, out, err = await _lucid("doctor", "--config", str(write_setup(tmp_path, base)))
    assert code == 1
    assert err.strip() == "", err  # no raw log line before (or beside) the list
    assert out.lstrip().startswith("✓ config"), out
    model_line = next(line for line in out.splitlines() if "model" in line and "✗" in line)
    assert "could not reach the model provider" in model_line and "InternalServerError" not in out
