"""Health, readiness and storage failures as a monitor and a client see them, over HTTP:
HEAD /healthz, /readyz following the model's last call, a full disk answered with a JSON
507 (and not-ready), an unwritable path as one line in the CLI, and `lucid healthcheck`."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import httpx
import pytest

from tests.fakes.llm import Fail, Reply
from lucidgate.gateway.daemon.provider_watch import PROBE_INTERVAL_S
from lucidgate.gateway.daemon.serve import GatewayServer
from tests.test_webhook import AUTH, TOKEN, body, serving


@pytest.fixture
def health_config(make_config):
    return make_config(channels={"webhook": {"token": TOKEN, "callbackSecret": "cb-secret-0123456789",
                                             "waitTimeoutS": 60}},
                       agents={"defaults": {"llmRetries": 0}}, gateway={"port": 0})


async def test_head_healthz_is_200(health_config):
    async with serving(health_config) as (server, client):
        head = await client.head("/healthz")
        get = await client.get("/healthz")
    assert head.status_code == 200 and head.content == b""
    assert get.status_code == 200 and get.json()["status"] == "ok"


async def test_readyz_follows_the_last_model_call(health_config, fake_llm):
    async with serving(health_config) as (_, client):
        fake_llm.queue(Fail(503, "the model server is overloaded"))
        failed = await client.post("/v1/messages", json=body("first"))
        assert failed.status_code == 502 and "Sorry" in failed.json()["reply"]
        down = await client.get("/readyz")
        fake_llm.queue(Reply("back"))
        assert (await client.post("/v1/messages", json=body("second"))).json()["reply"] == "back"
        up = await client.get("/readyz")
        metrics = (await client.get("/metrics")).text
    assert down.status_code == 503
    provider = down.json()["checks"]["provider"]
    assert provider["ok"] is False and "last call FAILED" in provider["detail"]
    assert up.status_code == 200 and "last call succeeded" in up.json()["checks"]["provider"]["detail"]
    # Both replies count as messages out, the error reply included.
    assert re.search(r'^lucid_messages_out_total\{channel="webhook"\} 2\.0$', metrics, re.M), metrics
    assert "_created" not in metrics
    assert re.search(r"^process_resident_memory_bytes \d", metrics, re.M)
    assert re.search(r'^lucid_build_info\{.*version="[^"]+".*\} 1\.0$', metrics, re.M)


class Ticks:
    """The provider watch's pause, driven by the test: ``tick()`` lets one check run and
    returns once it has finished (the watch is back in its pause)."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self._go: asyncio.Queue[None] = asyncio.Queue()
        self._paused: asyncio.Queue[None] = asyncio.Queue()

    async def wait(self, seconds: float) -> None:
        self.asked.append(seconds)
        self._paused.put_nowait(None)
        await self._go.get()

    async def tick(self) -> None:
        self._go.put_nowait(None)
        await asyncio.wait_for(self._paused.get(), 30)


async def test_readyz_recovers_without_traffic_once_the_provider_is_back(health_config, fake_llm):
    echo = fake_llm.default
    ticks = Ticks()
    server = GatewayServer(health_config, access_log=False)
    server.state.provider_watch.wait = ticks.wait
    async with server, httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
        await asyncio.wait_for(ticks._paused.get(), 30)  # the watch runs and pauses first
        await ticks.tick()  # healthy: a check sends nothing
        assert fake_llm.requests == []
        fake_llm.default = lambda request: Fail(503, "the model server is down")
        assert "Sorry" in (await client.post("/v1/messages", json=body("first"))).json()["reply"]
        assert (await client.get("/readyz")).status_code == 503
        await ticks.tick()  # still down: the probe fails, still not ready
        still_down = await client.get("/readyz")
        fake_llm.default = echo  # the provider comes back; nobody sends a message
        await ticks.tick()
        up = await client.get("/readyz")
        await ticks.tick()  # healthy again: no more probes
    assert still_down.status_code == 503
    assert up.status_code == 200, up.json()
    assert "last call succeeded" in up.json()["checks"]["provider"]["detail"]
    probes = [r for r in fake_llm.requests if r.get("max_tokens") == 1]
    assert len(fake_llm.requests) == 3 and len(probes) == 2  # the turn, then one probe per check
    assert ticks.asked and set(ticks.asked) == {PROBE_INTERVAL_S} and PROBE_INTERVAL_S < 60


async def test_a_full_disk_is_a_json_507_and_makes_the_gateway_not_ready(health_config):
    async with serving(health_config) as (server, client):
        inbox = server.state.gateway.parts.bus._inbox
        assert inbox is not None
        real = inbox._fh
        full = open("/dev/full", "a", encoding="utf-8")  # the kernel's "no space left"
        inbox._fh = full
        try:
            refused = await client.post("/v1/messages", json=body("no room"))
            ready = await client.get("/readyz")
        finally:
            inbox._fh = real
            try:
                full.close()  # flushing what is buffered fails too
            except OSError:
                pass
    assert refused.status_code == 507
    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["detail"].startswith("the disk is full")
    assert ready.status_code == 503
    workspace = ready.json()["checks"]["workspace"]
    assert workspace["ok"] is False and "the disk is full" in workspace["detail"]


async def _not_ready_within(client: httpx.AsyncClient, seconds: float) -> httpx.Response:
    """Poll /readyz until it answers 503; fail the test if it still says ready after ``seconds``."""
    answers: list[httpx.Response] = []

    async def check() -> None:
        while True:
            answers.append(await client.get("/readyz"))
            if answers[-1].status_code == 503:
                return
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(check(), seconds)
    except TimeoutError:
        raise AssertionError(f"/readyz still ready {seconds:g} s after the consumer died") from None
    return answers[-1]


def _task(name: str) -> asyncio.Task[object]:
    [task] = [t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()]
    return task


async def test_readyz_turns_not_ready_when_the_agent_consumer_is_cancelled(health_config, fake_llm, caplog):
    async with serving(health_config) as (server, client):
        assert (await client.get("/readyz")).status_code == 200
        consumer = _task("agent-consume")
        consumer.cancel()
        down = await _not_ready_within(client, 10)
    agent = down.json()["checks"]["agent"]
    assert agent["ok"] is False and "agent-consume was cancelled" in agent["detail"]
    assert any(r.levelname == "ERROR" and "agent-consume was cancelled" in r.getMessage() for r in caplog.records)


async def test_a_consumer_that_dies_is_logged_with_its_traceback_and_readyz_says_so(
        health_config, fake_llm, caplog):
    async with serving(health_config) as (server, client):
        bus = server.state.gateway.parts.bus

        async def broken(agent: str = "") -> object:
            raise RuntimeError("the inbox queue broke")

        bus.consume_inbound = broken  # type: ignore[method-assign]
        fake_llm.queue(Reply("answered"))
        # The consumer already waits in the real consume: this message is the last it takes.
        first = await client.post("/v1/messages", json=body("one"))
        assert first.json()["reply"] == "answered"
        down = await _not_ready_within(client, 10)
    assert "RuntimeError: the inbox queue broke" in down.json()["checks"]["agent"]["detail"]
    [death] = [r for r in caplog.records if r.levelname == "ERROR" and "agent-consume died" in r.getMessage()]
    assert death.exc_info is not None and "the inbox queue broke" in str(death.exc_info[1])
    assert death.exc_info[2] is not None  # with its traceback


def _unprivileged() -> list[str]:
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []


async def _run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_permission_denied_is_one_clear_line_in_the_cli(tmp_path: Path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        code, out, err = await _run(*_unprivileged(), sys.executable, "-c", "from lucidgate.gateway.cli import main; main()",
                                    "onboard", "--config", str(locked / "conf" / "config.json"))
    finally:
        locked.chmod(0o700)
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cannot be written (Permission denied)" in lines[0]
    assert "Traceback" not in err


@pytest.mark.slow
async def test_lucid_healthcheck_exit_codes(health_config):
    cli = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "healthcheck"]
    async with serving(health_config) as (server, _):
        ok = await _run(*cli, "--url", server.url)
    gone = await _run(*cli, "--url", server.url, "--timeout", "5")
    assert ok[0] == 0 and "healthy" in ok[1]
    assert gone[0] == 1 and "unhealthy" in gone[2]


async def test_storage_errors_keep_other_errors_generic(health_config):
    from lucidgate.gateway.daemon.health import describe_os_error

    import errno

    assert describe_os_error(OSError(errno.EROFS, "Read-only file system", "/ws/x"))[0] == 503
    assert describe_os_error(OSError(errno.EDQUOT, "Disk quota exceeded"))[0] == 507
    status, text = describe_os_error(OSError(errno.EIO, "Input/output error", "/ws/y"))
    assert status == 500 and "/ws/y" in text
    _ = httpx  # imported for the type of the clients above
