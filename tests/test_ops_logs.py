"""Logs an operator can search: JSON lines of a turn carry its session, channel and turn id;
JSON mode prints nothing but JSON; nothing is wrapped at 80 columns; probes and scrapes
stay out of the access log."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from lucidgate.gateway.cli import build_app
from lucidgate.gateway.logs import setup_logging, turn_log_context
from lucidgate.gateway.daemon.serve import GatewayServer
from tests.fakes.llm import Fail, Reply, ToolCalls
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
            assert (await client.post("/v1/messages", json=body("hello"))).status_code == 502
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
        sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "gateway", *proc.config_args,
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


OPERATIONS_DOC = Path(__file__).parents[1] / "docs" / "operations.md"


def run_jq(program: str, records: list[dict[str, object]]) -> list[dict[str, object]]:
    """``jq -c program`` over JSON lines: the real jq when installed, else the two forms the
    operations guide uses evaluated here: ``select(.f == "v")`` and ``select(.f) | {a, b}``."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    if shutil.which("jq"):
        out = subprocess.run(["jq", "-c", program], input=text, capture_output=True, text=True, check=True)
        return [json.loads(line) for line in out.stdout.splitlines()]
    if match := re.fullmatch(r'select\(\.(\w+) == "([^"]*)"\)', program):
        return [r for r in records if r.get(match[1]) == match[2]]
    match = re.fullmatch(r"select\(\.(\w+)\) \| \{([\w, ]+)\}", program)
    assert match, f"no stand-in for jq {program!r}"
    keys = [k.strip() for k in match[2].split(",")]
    return [{k: r.get(k) for k in keys} for r in records if r.get(match[1])]


async def test_each_turn_logs_one_info_line_and_the_documented_jq_finds_it(json_log, make_config, fake_llm):
    config = make_config(channels={"webhook": {"token": TOKEN, "callbackSecret": "cb-secret-0123456789"}},
                         gateway={"port": 0})
    fake_llm.queue(ToolCalls([("memory_search", {"query": "tea"})]), Reply("Tea, I think."))
    async with GatewayServer(config, access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as client:
            answered = await client.post("/v1/messages", json=body("what do I drink?", chat="42"))
    assert answered.json()["reply"] == "Tea, I think."
    records = lines(json_log)
    [turn] = [r for r in records if "tokens_in" in r]
    assert turn["level"] == "info" and turn["session"] == "webhook:42" and turn["channel"] == "webhook"
    assert re.fullmatch(r"[0-9a-f]{12}", str(turn["turn"]))
    assert turn["model"] == "openai/fake-model" and turn["tools"] == ["memory_search"]
    assert turn["status"] == "done" and isinstance(turn["ms"], int)
    assert isinstance(turn["tokens_in"], int) and turn["tokens_in"] > 0 and turn["tokens_out"] > 0
    # docs/operations.md's filters, as printed (only the chat key swapped for this test's chat).
    printed = re.findall(r"jq (?:-c )?'([^']+)'", OPERATIONS_DOC.read_text(encoding="utf-8"))
    assert len(printed) >= 2, "docs/operations.md shows no jq filter"
    for program in printed:
        found = run_jq(program.replace("telegram:42", "webhook:42"), records)
        assert found and all(r["session"] == "webhook:42" for r in found), program
        assert any(all(turn[k] == v for k, v in r.items()) for r in found), (program, found)


def test_chatty_libraries_stay_quiet_at_info(json_log):
    for name in ("watchfiles.main", "httpx", "litellm", "apscheduler.scheduler"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        assert logging.getLogger(name).isEnabledFor(logging.WARNING), name
    assert logging.getLogger("lucidgate.gateway.agent.runner").isEnabledFor(logging.INFO)


async def test_connection_errors_reach_people_without_object_reprs():
    import ssl

    import aiohttp

    from lucidgate.gateway.model.errors import provider_detail

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as raised:
            await session.get(f"https://127.0.0.1:{port}/v1", ssl=ssl.create_default_context())
    assert "object at 0x" in str(raised.value)  # what aiohttp says
    said = provider_detail(raised.value)
    assert "object at 0x" not in said and f"127.0.0.1:{port}" in said
