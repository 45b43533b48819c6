"""The FastAPI app and the daemon around it: health, readiness, metrics, the OpenAPI
contract, the channel registry, logging redaction, the workspace lock and startup failure."""

from __future__ import annotations

import dataclasses
import asyncio
import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi.routing import APIRoute

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.registry import CHANNELS, ChannelDescriptor, ChannelUnavailable, build_channels
from lucidgate.config import Config
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.logs import secrets_from_config, setup_logging
from lucidgate.gateway.daemon.serve import (GatewayLocked, GatewayServer, ListenError, WorkspaceLock, WorkspaceLocks,
                                            bind_socket, gateway_workspaces, run_gateway)
from lucidgate.gateway.daemon.server import create_app
from tests.channel_kit import deps_at
from tests.fakes.llm import Fail
from tests.test_webhook import AUTH, TOKEN, body, serving

# ----------------------------------------------------------------------------- health, readiness, metrics


async def test_health_ready_and_metrics(wh_config, fake_llm):
    async with serving(wh_config()) as (server, client):
        health = await client.get("/healthz", headers={"Authorization": ""})
        assert health.status_code == 200 and health.json()["status"] == "ok"
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        checks = ready.json()["checks"]
        assert ready.json()["ready"] is True
        # Every registered component is asked, and each says it is alive.
        components = [c.name for c in server.state.gateway.components]
        assert list(checks) == components and all(c["ok"] for c in checks.values()), checks
        assert {"workspace", "provider", "bus", "webhook", "agent", "scheduler"} <= set(components)
        assert (await client.post("/v1/messages", json=body())).status_code == 200
        await server.state.gateway.parts.agent.idle()  # the turn is timed after its reply went out
        metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert re.search(r'^lucid_messages_in_total\{channel="webhook"\} 1\.0$', metrics.text, re.M)
    assert re.search(r'^lucid_messages_out_total\{channel="webhook"\} 1\.0$', metrics.text, re.M)
    assert "lucid_turn_seconds_count 1.0" in metrics.text


@pytest.fixture
def wh_config(make_config):
    def build(webhook: dict[str, Any] | None = None, **sections: Any) -> Config:
        hook = {"token": TOKEN, "callbackSecret": "cb-secret-0123456789", "callbackAllowHosts": ["127.0.0.1"],
                "waitTimeoutS": 60, **(webhook or {})}
        return make_config(channels={"webhook": hook}, gateway={"port": 0, "shutdownGraceS": 2}, **sections)

    return build


async def test_starts_without_a_model_and_readyz_says_why(wh_config, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = wh_config(providers={"openai": {"apiKey": "", "apiBase": None}})
    async with serving(config) as (_, client):
        assert (await client.get("/healthz")).status_code == 200
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    provider = ready.json()["checks"]["provider"]
    assert provider["ok"] is False and "apiKey" in provider["detail"] and "apiBase" in provider["detail"]
    assert ready.json()["checks"]["bus"]["ok"] is True
    assert any("no model is configured" in r.getMessage() for r in caplog.records)


async def test_readyz_reports_an_unwritable_workspace(wh_config, fake_llm, workspace):
    moved = workspace.with_name("moved-away")
    async with serving(wh_config()) as (_, client):
        workspace.rename(moved)
        workspace.write_text("not a directory")
        try:
            ready = await client.get("/readyz")
        finally:
            workspace.unlink()
            moved.rename(workspace)
        assert (await client.get("/readyz")).status_code == 200
    assert ready.status_code == 503
    assert ready.json()["checks"]["workspace"]["ok"] is False
    assert "not writable" in ready.json()["checks"]["workspace"]["detail"]


# ----------------------------------------------------------------------------- the OpenAPI contract


def _validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A JSON Schema 2020-12 validator resolving ``#/components/...`` against the spec.

    ``pattern`` is checked with ECMA-262 semantics, as JSON Schema specifies: Python's ``$``
    also matches before a trailing newline, which would call "id\\n" valid.
    """
    def pattern(validator: Any, regex: str, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
        if isinstance(instance, str) and not re.search(re.sub(r"\$$", r"\\Z", regex), instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {regex!r}")

    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": pattern})
    return cls({**schema, "components": spec["components"]})


def _api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    """Every API route the app serves, including those of included routers."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):  # FastAPI keeps included routers whole
            yield from _api_routes(route.original_router.routes)


async def test_openapi_matches_the_real_routes(wh_config, fake_llm):
    async with serving(wh_config()) as (server, client):
        spec = (await client.get("/openapi.json")).json()
        docs = await client.get("/docs")
    assert docs.status_code == 200
    real = {(r.path_format, m) for r in _api_routes(server.app.routes) for m in r.methods}
    documented = {(path, method.upper()) for path, ops in spec["paths"].items() for method in ops}
    assert real == documented
    assert {("/v1/messages", "POST"), ("/v1/sessions", "GET"), ("/v1/sessions/{key}", "GET"),
            ("/v1/sessions/{key}", "DELETE"), ("/healthz", "GET"), ("/readyz", "GET"),
            ("/metrics", "GET")} <= documented
    post = spec["paths"]["/v1/messages"]["post"]
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request_schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(request_schema["properties"]) == {"chat_id", "sender_id", "text", "idempotency_key",
                                                 "callback_url", "wait", "stream"}
    assert "text/event-stream" in post["responses"]["200"]["content"]  # stream=true is documented
    assert sorted(request_schema["required"]) == ["chat_id", "sender_id", "text"]
    assert request_schema["additionalProperties"] is False
    props = request_schema["properties"]
    for field in ("chat_id", "sender_id"):  # every constraint the model enforces is in the schema
        assert {"minLength": 1, "maxLength": 256}.items() <= props[field].items() and props[field]["pattern"]
    assert props["text"]["minLength"] == 1 and props["wait"]["type"] == "boolean"
    assert post["requestBody"]["required"] is True
    assert {"HTTPBearer": []} in post["security"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in spec["paths"].items():
        if path.startswith("/v1/"):
            for op in ops.values():
                assert {"401", "503"} <= set(op["responses"]), path


async def test_every_documented_response_of_post_messages_is_real(wh_config, fake_llm, monkeypatch):
    """Trigger each documented status and validate the body against its documented schema."""
    # waitTimeoutS leaves room for the first turn's warm-up on a loaded 2-core machine
    config = wh_config({"rateLimitPerMin": 3, "waitTimeoutS": 2.0, "maxBodyBytes": 2048, "owners": ["boss"]})
    seen: dict[str, dict[str, Any]] = {}
    async with serving(config) as (server, client):
        spec = (await client.get("/openapi.json")).json()

        async def post(status: int, payload: Any = None, **kwargs: Any) -> None:
            r = await client.post("/v1/messages", json=payload, **kwargs)
            assert r.status_code == status, r.text
            seen[str(status)] = r.json()

        await post(200, body(idempotency_key="k"))
        await post(202, body(wait=False))
        await post(409, body("changed", idempotency_key="k"))
        await post(403, body("owner into the guest's chat", sender="boss"))
        await post(429, body())
        echo = fake_llm.default  # the model refuses this sender's turn (a 400 is not retried)
        fake_llm.default = lambda r: (Fail(400, "refused") if "sender: failing" in fake_llm.last_user_text(r)
                                      else echo(r))
        await post(502, body(sender="failing"))
        fake_llm.default = echo
        fake_llm.latency = 3.0
        await post(504, body(sender="slow"))
        await post(422, {"chat_id": 5}, headers={})
        await post(413, {"text": "x" * 5000})
        r = await client.post("/v1/messages", json=body(), headers={"Authorization": "Bearer nope"})
        seen[str(r.status_code)] = r.json()
        server.state.gateway.parts.bus.close_intake()
        await post(503, body(sender="late"))
    responses = spec["paths"]["/v1/messages"]["post"]["responses"]
    assert set(seen) == set(responses), (sorted(seen), sorted(responses))
    for status, data in seen.items():
        schema = responses[status]["content"]["application/json"]["schema"]
        _validator(spec, schema).validate(data)


# ----------------------------------------------------------------------------- channel registry


def exploding_factory(config: Config, deps: Any) -> Any:
    raise RuntimeError("kaboom")


def _registry(factories: dict[str, str]) -> dict[str, ChannelDescriptor]:
    """The real descriptors of these channels, built by the given factories instead."""
    return {name: dataclasses.replace(CHANNELS[name], factory=target) for name, target in factories.items()}


def refusing_factory(config: Config, deps: Any) -> Any:
    raise ChannelUnavailable("the platform said no")


def test_a_channel_that_fails_to_build_never_stops_the_others(make_config, caplog):
    caplog.set_level(logging.INFO, logger="lucidgate.channels.registry")
    config = make_config(channels={"telegram": {"enabled": True, "token": "123456:abc"},
                                   "slack": {"enabled": True, "botToken": "xoxb-1", "appToken": "xapp-1"},
                                   "webhook": {"token": TOKEN}})
    factories = {"telegram": "tests.test_server:exploding_factory",
                 "slack": "tests.test_server:refusing_factory",
                 "webhook": "lucidgate.channels.webhook:build"}
    built = build_channels(config, deps_at(MessageBus(), config.workspace), registry=_registry(factories))
    assert list(built) == ["webhook"]
    lines = [r.getMessage() for r in caplog.records]
    assert "telegram: failed to build — disabled" in lines
    assert "slack: the platform said no — disabled" in lines
    assert any(line.startswith("webhook: enabled") for line in lines)


def test_missing_tokens_and_modules_are_reported_per_channel(make_config, caplog):
    caplog.set_level(logging.INFO, logger="lucidgate.channels.registry")
    config = make_config(channels={"telegram": {"enabled": True}, "slack": {"enabled": True, "botToken": "x"},
                                   "webhook": {"enabled": True, "token": TOKEN}})
    factories = {"telegram": "lucidgate.channels.telegram:build", "slack": "lucidgate.channels.slack:build",
                 "webhook": "no_such_module_for_lucid:build"}
    assert build_channels(config, deps_at(MessageBus(), config.workspace), registry=_registry(factories)) == {}
    lines = [r.getMessage() for r in caplog.records]
    assert "telegram: no token (set channels.telegram.token) — disabled" in lines
    assert "slack: socket mode needs an appToken (channels.slack.appToken) — disabled" in lines
    assert any(line.startswith("webhook: cannot load no_such_module_for_lucid") for line in lines)
    assert any("no channel is enabled" in line for line in lines)


def test_disabled_platforms_are_never_imported(tmp_path):
    code = (
        "import sys, json\n"
        "from lucidgate.config import Config\n"
        "from lucidgate.channels.bus import MessageBus\n"
        "from lucidgate.channels.registry import build_channels\n"
        "from lucidgate.channels.deps import ChannelDeps\n"
        "from lucidgate.channels.pairing import PairingStore, default_path\n"
        f"cfg = Config.model_validate({{'agents': {{'defaults': {{'workspace': {str(tmp_path)!r}}}}},"
        f" 'channels': {{'webhook': {{'token': 'abcdefgh'}}}}}})\n"
        "deps = ChannelDeps(MessageBus(), cfg.workspace, PairingStore(default_path(cfg.workspace)))\n"
        "built = build_channels(cfg, deps)\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('telegram', 'slack_bolt', 'slack_sdk')"
        " or m in ('lucidgate.channels.telegram', 'lucidgate.channels.slack')]\n"
        "print(json.dumps({'built': sorted(built), 'loaded': loaded}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"built": ["openai", "web", "webhook"], "loaded": []}


# ----------------------------------------------------------------------------- logging


SECRETS = {
    "webhook": "wh-secret-token-0123456789",
    "callback": "cb-secret-abcdefghijkl",
    "apikey": "sk-proj-abcdefghijklmnopqrstuvwx",
    "telegram": "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    "slack": "xoxb-1111-2222-abcdefghijkl",
    "header": "hdr-secret-998877665544",
}


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def _secret_config(make_config: Any) -> Config:
    return make_config(
        channels={"webhook": {"token": SECRETS["webhook"], "callbackSecret": SECRETS["callback"]},
                  "telegram": {"token": SECRETS["telegram"]}, "slack": {"botToken": SECRETS["slack"]}},
        providers={"openai": {"apiKey": SECRETS["apikey"], "extraHeaders": {"X-Api-Key": SECRETS["header"]}}},
    )


def test_secrets_are_found_in_the_config(make_config):
    found = set(secrets_from_config(_secret_config(make_config)))
    assert set(SECRETS.values()) <= found


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_are_redacted_from_every_log_line(make_config, restore_logging, fmt):
    stream = io.StringIO()
    redactor = setup_logging(fmt=fmt, stream=stream)
    redactor.add(secrets_from_config(_secret_config(make_config)))
    log = logging.getLogger("tests.redaction")
    log.info("GET https://api.telegram.org/bot%s/getUpdates", SECRETS["telegram"])
    logging.getLogger("httpx").warning("HTTP Request: POST https://api.telegram.org/bot%s/sendMessage",
                                       SECRETS["telegram"])
    log.info("headers: {'Authorization': 'Bearer %s'}", SECRETS["webhook"])
    log.warning("token=%s and secret %s", SECRETS["webhook"], SECRETS["callback"])
    log.info("slack said %s", SECRETS["slack"])
    log.info("provider header %s", SECRETS["header"])
    log.info("Authorization: Bearer some-unknown-credential-123")
    log.info('{"apiKey": "unknown-key-value-777"}')
    try:
        raise RuntimeError(f"auth failed for key {SECRETS['apikey']}")
    except RuntimeError:
        log.exception("call failed")
    output = stream.getvalue()
    for secret in [*SECRETS.values(), "some-unknown-credential-123", "unknown-key-value-777"]:
        assert secret not in output, (secret, output)
    assert "getUpdates" in output and "sendMessage" in output and "Bearer ***" in output
    assert "RuntimeError" in output and "call failed" in output
    if fmt == "json":
        entries = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        assert len(entries) == 9
        assert entries[-1]["level"] == "error" and "RuntimeError" in entries[-1]["exception"]
        assert {"time", "level", "logger", "message"} <= set(entries[0])


# ----------------------------------------------------------------------------- lock, port, startup


def test_one_gateway_per_workspace_lock(tmp_path):
    first = WorkspaceLock(tmp_path)
    first.acquire()
    assert (tmp_path / "gateway.lock").read_text().strip() == str(os.getpid())
    with pytest.raises(GatewayLocked, match=f"pid {os.getpid()}") as refused:
        WorkspaceLock(tmp_path).acquire()
    # It says how several terminals can chat at once, not only "stop it".
    assert "several terminals" in str(refused.value) and "`lucid gateway`" in str(refused.value)
    # A second gateway or an import cannot talk to the first: no advice to run a gateway.
    for purpose, step in (("gateway", "One gateway serves a workspace"), ("import", "run the import")):
        with pytest.raises(GatewayLocked) as refused:
            WorkspaceLock(tmp_path, purpose).acquire()  # type: ignore[arg-type]
        assert step in str(refused.value) and "several terminals" not in str(refused.value)
    first.release()
    with WorkspaceLock(tmp_path):
        pass


def test_a_gateway_holds_every_agents_workspace(make_config, tmp_path):
    """Issue 41: a daemon with agents "home" and "work" locks both workspaces, so a second
    gateway whose default workspace is work's is refused with the usual message (before it
    binds a port or touches anything), and the first's locks are not disturbed by it."""
    home, work = tmp_path / "home", tmp_path / "work"
    first = make_config(agents={"list": [{"id": "home", "workspace": str(home)},
                                         {"id": "work", "workspace": str(work)}]})
    assert set(gateway_workspaces(first)) == {home.resolve(), work.resolve(), first.workspace.resolve()}
    second = make_config(agents={"defaults": {"workspace": str(work)}})
    assert gateway_workspaces(second) == [work.resolve()]  # without a list: its one workspace, as before
    with WorkspaceLocks(gateway_workspaces(first), "gateway"):
        assert (work / "gateway.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(GatewayLocked, match=f"pid {os.getpid()}") as refused:
            run_gateway(second, access_log=False)
        assert f"holds the workspace {work.resolve()}" in str(refused.value)
        assert "One gateway serves a workspace" in str(refused.value)
        # All or none: a third daemon sharing only home's workspace takes nothing, not even
        # the workspaces it could lock, and leaves the first's locks in place.
        third = tmp_path / "third"
        with pytest.raises(GatewayLocked):
            WorkspaceLocks([third, home], "gateway").acquire()
        with WorkspaceLock(third):
            pass
        assert (home / "gateway.lock").read_text().strip() == str(os.getpid())
    with WorkspaceLocks(gateway_workspaces(second), "gateway"):  # released: free again
        pass


def test_a_busy_port_is_a_clear_error():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(ListenError, match="gateway.port"):
            bind_socket("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


async def _ok() -> None:
    return None


class BrokenChannel:
    name = "broken"

    def __init__(self) -> None:
        self.stopped = False

    async def start(self) -> None:
        raise RuntimeError("cannot connect")

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, msg: Any) -> None:
        return None


async def test_a_channel_that_cannot_start_is_disabled_and_the_rest_serve(wh_config, fake_llm):
    config = wh_config()
    gateway = build_gateway(config, http=True)
    broken = BrokenChannel()
    gateway.add_channel("broken", broken)
    async with GatewayServer(config, app=create_app(config, gateway=gateway), access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/healthz")).status_code == 200
    assert broken.stopped and gateway.failed_channels == {"broken": "cannot connect"}


async def test_startup_failure_exits_1_and_stops_what_started(wh_config, fake_llm, caplog):
    config = wh_config()
    gateway = build_gateway(config, http=True)
    broken = BrokenChannel()
    broken.start = _ok  # type: ignore[method-assign]
    gateway.add_channel("broken", broken)

    async def scheduler_fails() -> None:  # a part the gateway cannot run without
        raise RuntimeError("cannot start")

    gateway.parts.scheduler.start = scheduler_fails  # type: ignore[method-assign]
    server = GatewayServer(config, app=create_app(config, gateway=gateway), access_log=False)
    assert await asyncio.wait_for(server.serve(), 20) == 1
    assert broken.stopped and not gateway.parts.bus.accepting
    assert server.sock.fileno() == -1  # the socket is closed
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(server.url + "/healthz", headers=AUTH)
