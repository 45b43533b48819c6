"""`lucid agent` beside a running `lucid gateway`: one agent per workspace, over loopback."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lucidgate.memory.sessions import load_session_file
from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_import_light import AGENT_PROBE, run_probe
from tests.test_shutdown import GatewayProcess, _env

LUCID = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()"]


async def lucid(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*LUCID, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    return proc.returncode or 0, out.decode(), err.decode()


async def start_published(config_path: Path, env: dict[str, str], local_file: Path) -> tuple[GatewayProcess, str]:
    """Start ``lucid gateway`` and wait until it has written ``local_file`` (state/local.json):
    the process and its URL. Stopped again if it never gets that far."""
    gateway = await GatewayProcess(config_path, env).start()
    try:
        url = await gateway.url()
        for _ in range(100):
            if local_file.exists():
                break
            await asyncio.sleep(0.1)
    except BaseException:
        await gateway.stop()
        raise
    return gateway, url


def _chat_once(config_path: Path, env: dict[str, str], line: str, answer: str) -> str:
    """Type one line into an interactive ``lucid agent`` (a real pseudo-terminal), wait for
    ``answer`` on the screen, then leave; returns the banner it printed first."""
    import pexpect

    child = pexpect.spawn(sys.executable, ["-c", "from lucidgate.gateway.cli import main; main()", "agent", "-c",
                                           str(config_path)], env={**env, "PROMPT_TOOLKIT_NO_CPR": "1"},
                          encoding="utf-8", timeout=90, dimensions=(40, 120))
    try:
        child.expect_exact("you ›")
        banner = child.before
        child.sendline(line)
        child.expect_exact(answer)
        child.expect_exact("you ›")  # the next prompt is up (a Ctrl-D typed before it is lost)
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    return banner


@pytest.mark.slow
async def test_agent_talks_to_the_running_gateway_then_falls_back(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    home = tmp_path / "home"
    home.mkdir()
    workspace = tmp_path / "ws"
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                "llmRetryBaseDelayS": 0.01}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": fake_llm.base_url}},
        "gateway": {"port": 0},
    }))
    env = _env(home)
    local_file = workspace / "state" / "local.json"
    gateway, url = await start_published(config_path, env, local_file)
    try:
        published = json.loads(local_file.read_text())
        assert published["url"] == url and stat.S_IMODE(local_file.stat().st_mode) == 0o600
        async with httpx.AsyncClient(base_url=url) as client:
            wrong = await client.post("/v1/local/messages", json={"text": "hi"},
                                      headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
        fake_llm.queue(Reply("answered by the daemon"))
        code, out, err = await lucid("agent", "-m", "hello daemon", "--config", str(config_path), env=env)
        assert code == 0, err
        assert "answered by the daemon" in out
        assert len(fake_llm.requests) == 1
        # A one-shot beside the gateway is one plain request: no event loop, no rich, no model client.
        fake_llm.queue(Reply("answered again"))
        modules, out = await asyncio.to_thread(run_probe, AGENT_PROBE, config_path, tmp_path / "modules.txt",
                                               "agent -m again", env)
        assert "answered again" in out and "lucidgate" in modules
        heavy = modules & {"asyncio", "rich", "litellm", "numpy", "httpx", "fastapi"}
        assert not heavy, sorted(heavy)
        # The interactive terminal beside the gateway talks to it too, turn after turn.
        fake_llm.queue(Reply("a chat through the daemon"))
        banner = await asyncio.to_thread(_chat_once, config_path, env, "and a chat", "a chat through the daemon")
        assert f"via the gateway at {url}" in banner
    finally:
        assert await gateway.stop() == 0, gateway.output
    assert not local_file.exists()  # withdrawn at exit
    # the gateway wrote the turn to the one cli:local transcript, and no in-process inbox was used
    session = load_session_file(workspace / "sessions" / "cli_local.jsonl")
    assert [m["content"] for m in session.messages] == ["hello daemon", "answered by the daemon", "again",
                                                        "answered again", "and a chat", "a chat through the daemon"]
    assert not (workspace / "inbox.cli.jsonl").exists()
    # with the gateway gone, the same command runs the agent in-process on the same session
    fake_llm.queue(Reply("answered in-process"))
    code, out, err = await lucid("agent", "-m", "and now?", "--config", str(config_path), env=env)
    assert code == 0 and "answered in-process" in out, err
    second = fake_llm.requests[-1]["messages"]
    assert any(m.get("content") == "answered by the daemon" for m in second)


async def test_a_stale_local_file_is_ignored(tmp_path: Path) -> None:
    from lucidgate.gateway.daemon.local_client import find_running, publish

    publish(tmp_path, "http://127.0.0.1:9", "t")
    assert find_running(tmp_path) == ("http://127.0.0.1:9", "t")  # this very process is alive
    data = json.loads((tmp_path / "state" / "local.json").read_text())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that surely existed and has surely ended
    data["pid"] = gone.pid
    (tmp_path / "state" / "local.json").write_text(json.dumps(data))
    assert find_running(tmp_path) is None


async def test_local_route_checks_the_token_before_reading_the_body(make_config, fake_llm) -> None:
    from lucidgate.gateway.daemon.local_api import MAX_LOCAL_BODY_BYTES
    from lucidgate.gateway.daemon.serve import GatewayServer

    config = make_config(gateway={"port": 0})
    async with GatewayServer(config, access_log=False) as server:
        token = server.state.local_token
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            huge = b'{"text": "' + b"x" * (MAX_LOCAL_BODY_BYTES + 10) + b'"}'
            anonymous = await client.post("/v1/local/messages", content=huge,
                                          headers={"Content-Type": "application/json"})
            oversized = await client.post("/v1/local/messages", content=huge,
                                          headers={"Authorization": f"Bearer {token}",
                                                   "Content-Type": "application/json"})
            fake_llm.queue(Reply("ok"))
            fine = await client.post("/v1/local/messages", json={"text": "hi"},
                                      headers={"Authorization": f"Bearer {token}"})
    assert anonymous.status_code == 401 and len(anonymous.content) < 500
    assert oversized.status_code == 413 and len(oversized.content) < 500
    assert fine.status_code == 200 and fine.json() == {"ok": True, "reply": "ok"}


def test_a_wildcard_host_is_reached_at_loopback() -> None:
    from lucidgate.gateway.daemon.urls import local_url

    assert local_url("0.0.0.0", 18790) == "http://127.0.0.1:18790"
    assert local_url("::", 1) == "http://[::1]:1" and local_url("[::]", 1) == "http://[::1]:1"
    assert local_url("::1", 2) == "http://[::1]:2" and local_url("10.0.0.5", 3) == "http://10.0.0.5:3"


@pytest.mark.slow
async def test_healthcheck_checks_this_workspaces_gateway_and_names_its_url(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    mine, other = tmp_path / "mine.json", tmp_path / "other.json"
    # Listening on every interface, as in a container: the banner still names a URL one can open.
    mine.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws")}},
                                "gateway": {"host": "0.0.0.0", "port": 0}}))
    env = _env(home)
    gateway, url = await start_published(mine, env, tmp_path / "ws" / "state" / "local.json")
    try:
        assert url.startswith("http://127.0.0.1:") and "0.0.0.0" not in gateway.output
        port = int(url.rsplit(":", 1)[1])
        # Another workspace configured on the very port this gateway answers on.
        other.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "other-ws")}},
                                     "gateway": {"port": port}}))
        code, out, err = await lucid("healthcheck", "-c", str(mine), env=env)
        assert code == 0 and out.strip() == f"healthy: {url}", (out, err)
        code, out, err = await lucid("healthcheck", "-c", str(other), env=env)
        assert code == 1 and "no gateway is running on the workspace" in err and "other-ws" in err, (out, err)
    finally:
        assert await gateway.stop() == 0
    code, out, err = await lucid("healthcheck", "-c", str(mine), env=env)
    assert code == 1 and "unhealthy" in err
