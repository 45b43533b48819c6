"""Graceful shutdown: drain with 503s, let turns finish within the grace period, leave the
rest pending and resume them at the next start — in process, and for real with
``lucid gateway`` in a subprocess receiving SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lucidgate.memory.naming import session_file_stem
from lucidgate.gateway.daemon.serve import GatewayServer
from lucidgate.memory.sessions import load_session_file
from tests.test_webhook import AUTH, SECRET, TOKEN, CallbackSink, body, signature_ok


def session(workspace: Path, key: str = "webhook:c1") -> Any:
    return load_session_file(workspace / "sessions" / f"{session_file_stem(key)}.jsonl")


@pytest.fixture
def shutdown_config(make_config, fake_llm):
    def build(grace: float, **webhook: Any) -> Any:
        hook = {"token": TOKEN, "callbackSecret": SECRET, "callbackAllowHosts": ["127.0.0.1"],
                "waitTimeoutS": 30, "callbackBackoffS": 0.05, **webhook}
        return make_config(channels={"webhook": hook}, gateway={"port": 0, "shutdownGraceS": grace})

    return build


@asynccontextmanager
async def started(config: Any) -> AsyncIterator[tuple[GatewayServer, httpx.AsyncClient]]:
    server = GatewayServer(config, access_log=False)
    await server.__aenter__()
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            yield server, client
    finally:
        await server.shutdown()


# ----------------------------------------------------------------------------- in process


async def test_drain_answers_503_and_lets_the_running_turn_finish(shutdown_config, fake_llm, workspace):
    fake_llm.latency = 1.0
    async with started(shutdown_config(grace=10)) as (server, client):
        inflight = asyncio.create_task(client.post("/v1/messages", json=body("finish me")))
        await fake_llm.wait_for_requests(1, timeout=60)
        server.request_shutdown("SIGTERM")
        while not server.state.gateway.draining:  # the drain task has run its first step
            await asyncio.sleep(0)
        refused = await client.post("/v1/messages", json=body("too late", chat="other"))
        ready = await client.get("/readyz")
        health = await client.get("/healthz")
        answered = await inflight
        code = await server.shutdown()
    assert refused.status_code == 503 and "shutting down" in refused.json()["detail"]
    assert ready.status_code == 503 and ready.json()["checks"]["bus"] == {"ok": False, "detail": "shutting down"}
    assert health.status_code == 200
    assert answered.status_code == 200 and answered.json()["reply"].endswith("finish me")
    assert code == 0
    assert session(workspace).pending_state() is None
    assert not (workspace / "sessions" / "webhook_other.jsonl").exists()
    assert len(fake_llm.requests) == 1


async def test_a_callback_answered_within_the_grace_is_delivered_before_exit(shutdown_config, fake_llm):
    fake_llm.latency = 0.5
    async with CallbackSink() as sink:
        async with started(shutdown_config(grace=10)) as (server, client):
            r = await client.post("/v1/messages", json=body("quick", wait=False, callback_url=sink.url))
            assert r.status_code == 202
            server.request_shutdown("SIGTERM")
            assert await server.shutdown() == 0
        assert len(sink.received) == 1
    assert sink.payload(0)["reply"].endswith("quick") and signature_ok(sink.received[0])


async def test_grace_expiry_leaves_the_turn_pending_and_the_next_start_answers_it(
        shutdown_config, fake_llm, workspace):
    fake_llm.latency = 5.0
    config = shutdown_config(grace=0.3)
    async with CallbackSink() as sink:
        async with started(config) as (server, client):
            waiting = asyncio.create_task(client.post("/v1/messages", json=body("cut off", callback_url=sink.url)))
            await fake_llm.wait_for_requests(1)
            began = time.monotonic()
            server.request_shutdown("SIGTERM")
            released = await waiting
            assert await server.shutdown() == 0
            assert time.monotonic() - began < 4.0
        assert released.status_code == 503
        detail = released.json()
        assert "after the restart" in detail["detail"] and "callback_url" in detail["detail"]
        assert session(workspace).pending_state() == "pending_user_turn"
        assert sink.received == []

        fake_llm.latency = 0.0
        async with started(config):
            await sink.wait_for(1)
    payload = sink.payload(0)
    assert payload["message_id"] == detail["message_id"] and payload["reply"].endswith("cut off")
    assert session(workspace).pending_state() is None
    assert [m["role"] for m in session(workspace).messages] == ["user", "assistant"]
    assert len(fake_llm.requests) == 2


async def test_a_second_signal_skips_the_grace_period(shutdown_config, fake_llm, workspace):
    fake_llm.latency = 10.0
    async with started(shutdown_config(grace=60)) as (server, client):
        r = await client.post("/v1/messages", json=body("long", wait=False))
        assert r.status_code == 202
        await fake_llm.wait_for_requests(1)
        began = time.monotonic()
        server.request_shutdown("SIGINT")
        await asyncio.sleep(0)  # the drain task starts waiting for the running turn
        server.request_shutdown("SIGINT")
        assert await server.shutdown() == 0
        assert time.monotonic() - began < 30.0  # far below the 60 s grace it would have waited
    assert session(workspace).pending_state() == "pending_user_turn"


# ----------------------------------------------------------------------------- the real process


class GatewayProcess:
    """``lucid gateway`` in a subprocess, its output collected as it comes."""

    def __init__(self, config_path: Path, env: dict[str, str], *, by_env: bool = False) -> None:
        """``by_env``: name the config in ``$LUCIDGATE_CONFIG`` instead of ``--config`` (a first
        run may create it there, as the service and the container do; a ``--config`` must exist)."""
        self.config_path = config_path
        self.env = {**env, "LUCIDGATE_CONFIG": str(config_path)} if by_env else env
        self.config_args = [] if by_env else ["--config", str(config_path)]
        self.proc: asyncio.subprocess.Process | None = None
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers: list[asyncio.Task[None]] = []
        self._url: asyncio.Future[str] | None = None

    async def start(self) -> GatewayProcess:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "gateway",
            *self.config_args, "--no-access-log",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self.env)
        self._url = asyncio.get_running_loop().create_future()
        self._readers = [asyncio.create_task(self._read(self.proc.stdout, self.stdout)),
                         asyncio.create_task(self._read(self.proc.stderr, self.stderr))]
        return self

    async def _read(self, stream: asyncio.StreamReader | None, into: list[str]) -> None:
        assert stream is not None
        while line := await stream.readline():
            text = line.decode("utf-8", "replace")
            into.append(text)
            match = re.search(r"webhook: POST (http://\S+)/v1/messages", text)
            if match and self._url is not None and not self._url.done():
                self._url.set_result(match.group(1))

    async def url(self, timeout: float = 180) -> str:  # a bound, not a wait: a loaded machine starts slowly
        assert self._url is not None and self.proc is not None
        exited = asyncio.create_task(self.proc.wait())
        done, _ = await asyncio.wait({self._url, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        exited.cancel()
        if self._url not in done:
            raise AssertionError(f"the gateway did not come up:\n{self.output}")
        return self._url.result()

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"the gateway did not exit after {sig}:\n{self.output}") from None
        await asyncio.gather(*self._readers)
        return code

    @property
    def output(self) -> str:
        return "".join(self.stdout) + "\n--- stderr ---\n" + "".join(self.stderr)


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("LUCIDGATE_") and not k.upper().endswith("_API_KEY")}
    env.update({"HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1",
                "NO_COLOR": "1", **extra})
    return env


@pytest.mark.slow
async def test_first_run_without_a_model_starts_and_a_second_gateway_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    config_path = tmp_path / "conf" / "config.json"
    env = _env(home, LUCIDGATE_GATEWAY__PORT="0")
    first = await GatewayProcess(config_path, env, by_env=True).start()
    try:
        url = await first.url()
        written = json.loads(config_path.read_text())
        token = written["channels"]["webhook"]["token"]
        assert len(token) >= 32 and (home / ".lucidgate" / "workspace" / "SOUL.md").exists()
        async with httpx.AsyncClient(base_url=url) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["provider"]["ok"] is False
            assert (await client.get("/healthz")).status_code == 200
            denied = await client.post("/v1/messages", json=body())
            assert denied.status_code == 401
        second = await GatewayProcess(config_path, env, by_env=True).start()
        assert await asyncio.wait_for(second.proc.wait(), 30) == 1  # type: ignore[union-attr]
        await second.stop()
        # It names the gateway holding the lock, never this test process (a whole-number match:
        # pid 724 must not be found inside "pid 10724").
        assert "already running" in second.output
        assert not re.search(rf"\b{os.getpid()}\b", second.output)
    finally:
        code = await first.stop()
    assert code == 0, first.output
    assert "first run: wrote a default config" in first.output
    assert "No model is configured yet" in first.output and "apiBase" in first.output
    # Said once as instructions and once as the daemon's status line, not three times.
    assert first.output.lower().count("no model is configured") == 2, first.output
    assert "webhook: enabled" in first.output
    assert token not in first.output and token not in second.output


@pytest.mark.slow
async def test_sigterm_mid_turn_exits_0_and_the_restart_delivers_the_answer(tmp_path, fake_llm):
    home = tmp_path / "home"
    home.mkdir()
    workspace = tmp_path / "ws"
    config_path = tmp_path / "config.json"
    async with CallbackSink() as sink:
        config_path.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                    "llmRetryBaseDelayS": 0.01, "llmTimeoutS": 30}},
            "providers": {"openai": {"apiKey": "sk-test-subprocess", "apiBase": fake_llm.base_url}},
            "channels": {"webhook": {"token": TOKEN, "callbackSecret": SECRET, "callbackAllowHosts": ["127.0.0.1"],
                                     "callbackBackoffS": 0.1}},
            "gateway": {"port": 0, "shutdownGraceS": 0.5},
        }))
        env = _env(home)
        fake_llm.latency = 4.0
        first = await GatewayProcess(config_path, env).start()
        try:
            url = await first.url()
            async with httpx.AsyncClient(base_url=url, headers=AUTH) as client:
                r = await client.post("/v1/messages", json=body("survive me", wait=False, callback_url=sink.url))
                assert r.status_code == 202, r.text
                message_id = r.json()["message_id"]
            await fake_llm.wait_for_requests(1, timeout=30)
        finally:
            code = await first.stop(signal.SIGTERM)
        assert code == 0, first.output
        assert "grace period over with 1 turn(s) unfinished" in first.output
        assert "Traceback" not in first.output
        assert sink.received == []
        assert session(workspace).pending_state() == "pending_user_turn"

        fake_llm.latency = 0.0
        second = await GatewayProcess(config_path, env).start()
        try:
            await second.url()
            await sink.wait_for(1, timeout=30)
        finally:
            code = await second.stop(signal.SIGINT)
        assert code == 0, second.output
    payload = sink.payload(0)
    assert payload["message_id"] == message_id and payload["reply"].endswith("survive me")
    assert signature_ok(sink.received[0])
    assert session(workspace).pending_state() is None
    assert len(fake_llm.requests) == 2
    assert "sk-test-subprocess" not in first.output + second.output
