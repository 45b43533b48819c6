"""Logs an operator can search: JSON lines of a turn carry its session, channel and turn id;
JSON mode prints nothing but JSON; nothing is wrapped at 80 columns; probes and scrapes
stay out of the access log."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import build_app
from gateway.logs import setup_logging, turn_log_context
from gateway.daemon.serve import GatewayServer
from tests.fakes.llm import Fail
from tests.test_shutdown import GatewayProcess, _env
from tests.test_webhook import AUTH, TOKEN, body


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    setup_logging(fmt="json", stream=stream)
    try:
        yield stream
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if h.get_name() == "lucid"]:
            root.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_the_turn_context_tags_json_lines_and_is_gone_after(json_log):
    log = logging.getLogger("lucid.test")
    with turn_log_context("telegram:42", "telegram") as turn:
        log.warning("inside")
    log.warning("outside")
    inside, outside = lines(json_log)[-2:]
    assert inside["session"] == "telegram:42" and inside["channel"] == "telegram" and inside["turn"] == turn
    assert "session" not in outside and "turn" not in outside


async def test_a_failing_turn_logs_with_its_session_and_probes_skip_the_access_log(json_log, make_config, fake_llm):
    config = make_config(channels={"webhook": {"token": TOKEN, "callbackSecret": "cb-secret-0123456789"}},
                         agents={"defaults": {"llmRetries": 0}}, gateway={"port": 0})
    async with GatewayServer(config, access_log=True) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as client:
            fake_llm.queue(Fail(400, "bad request from the model"))
            assert (await client.post("/v1/messages", json=body("hello"))).status_code == 200
            for path in ("/healthz", "/readyz", "/metrics", "/metrics?x=1"):
                await client.get(path)
            await client.get("/openapi.json")
    records = lines(json_log)
    failed = [r for r in records if "turn for webhook:c1 failed" in str(r["message"])]
    assert failed and failed[0]["session"] == "webhook:c1" and failed[0]["channel"] == "webhook"
    assert re.fullmatch(r"[0-9a-f]{12}", str(failed[0]["turn"]))
    access = [str(r["message"]) for r in records if r["logger"] == "uvicorn.access"]
    acc = logging.getLogger("uvicorn.access")
    assert any("/openapi.json" in a for a in access) and any("/v1/messages" in a for a in access), (
        acc.disabled, acc.level, acc.propagate, acc.filters, acc.handlers, logging.getLogger("uvicorn").disabled,
        logging.getLogger("uvicorn").propagate, logging.getLogger("uvicorn").level)
    assert not any(re.search(r'"(GET|HEAD) /(healthz|readyz|metrics)', a) for a in access), access


@pytest.mark.slow
async def test_json_mode_prints_only_json_lines(tmp_path, fake_llm):
    home = tmp_path / "home"
    home.mkdir()
    config_path = tmp_path / "fresh" / "config.json"  # first run: the config is written
    env = _env(home, LUCIDGATE_GATEWAY__PORT="0", LUCIDGATE_PROVIDERS__OPENAI__API_BASE=fake_llm.base_url,
               LUCIDGATE_AGENTS__DEFAULTS__WORKSPACE=str(tmp_path / "ws"))
    proc = GatewayProcess(config_path, env, by_env=True)
    await _start_json(proc)
    try:
        await proc.url()
    finally:
        code = await proc.stop(signal.SIGTERM)
    assert code == 0, proc.output
    every = [line for line in proc.stdout + proc.stderr if line.strip()]
    parsed = [json.loads(line) for line in every]  # raises on any plain-text line
    messages = [str(p["message"]) for p in parsed]
    assert any(m.startswith("first run: wrote a default config") for m in messages)
    assert any(m.startswith("webhook: POST http://") for m in messages)


async def _start_json(proc: GatewayProcess) -> None:
    import asyncio
    import sys

    proc.proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from gateway.cli import main; main()", "gateway", *proc.config_args,
        "--log-format", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=proc.env)
    proc._url = asyncio.get_running_loop().create_future()
    proc._readers = [asyncio.create_task(proc._read(proc.proc.stdout, proc.stdout)),
                     asyncio.create_task(proc._read(proc.proc.stderr, proc.stderr))]


def test_output_is_not_wrapped_at_80_columns(tmp_path: Path):
    deep = tmp_path / ("a-rather-long-folder-name-" * 5) / "workspace"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(deep)}}}))
    result = CliRunner().invoke(build_app(), ["status", "--config", str(config)])
    assert f"workspace: {deep}\n" in result.output  # one line, however long
