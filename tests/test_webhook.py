"""The HTTP webhook channel, end to end: a real uvicorn server on loopback, the real agent,
litellm against the fake OpenAI server, and a local receiver for signed callbacks."""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import hmac
import json
import os
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from fastapi import FastAPI

import lucidgate.channels.webhook.intake as webhook_module
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.webhook import WebhookChannel
from lucidgate.channels.webhook.store import WebhookStore
from lucidgate.gateway.daemon.serve import GatewayServer
from lucidgate.memory.sessions import load_session_file
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.served import served_client
from tests.waiting import until, until_async

TOKEN = "wh-token-0123456789abcdef"
SECRET = "cb-secret-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
OWNER_TOKEN = "wh-owner-token-0123456789abcdef"
OWNER_AUTH = {"Authorization": f"Bearer {OWNER_TOKEN}"}


class CallbackSink:
    """A loopback receiver for callbacks: records every POST, answers as scripted."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.script: collections.deque[int | str] = collections.deque()
        self.default: int | str = 200
        self.retry_after: str | None = None  # sent with every 429
        self._runner: web.AppRunner | None = None
        self._cond = asyncio.Condition()
        self.url = ""

    async def __aenter__(self) -> CallbackSink:
        app = web.Application()
        app.router.add_post("/cb", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/cb"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with self._cond:
            self.received.append({"headers": dict(request.headers), "body": body, "at": time.monotonic()})
            self._cond.notify_all()
        action = self.script.popleft() if self.script else self.default
        if action == "hang":
            await asyncio.sleep(30)
        status = int(action) if action != "hang" else 200
        headers = {"Retry-After": self.retry_after} if status == 429 and self.retry_after else None
        return web.Response(status=status, headers=headers)

    async def wait_for(self, count: int, timeout: float = 10.0) -> None:
        async with self._cond:
            await asyncio.wait_for(self._cond.wait_for(lambda: len(self.received) >= count), timeout)

    def payload(self, index: int) -> dict[str, Any]:
        return json.loads(self.received[index]["body"])


def signature_ok(entry: dict[str, Any], secret: str = SECRET) -> bool:
    headers = {k.lower(): v for k, v in entry["headers"].items()}
    timestamp = headers["x-lucid-timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + entry["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-lucid-signature"], f"sha256={expected}")


@pytest.fixture
def wh_config(make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> Callable[..., Any]:
    """A config with the webhook on, loopback callbacks allowed and short timeouts."""

    def build(webhook: dict[str, Any] | None = None, **sections: Any) -> Any:
        hook = {"token": TOKEN, "ownerToken": OWNER_TOKEN, "callbackSecret": SECRET, "callbackAllowHosts": ["127.0.0.1"],
                "waitTimeoutS": 60, "callbackBackoffS": 0.05, "callbackTimeoutS": 2,
                "rateLimitPerMin": 1000, "rateLimitPerCredentialPerMin": 1000, "rateLimitGlobalPerMin": 1000,
                **(webhook or {})}
        gateway = {"port": 0, "shutdownGraceS": 2, **sections.pop("gateway", {})}
        return make_config(channels={"webhook": hook}, gateway=gateway, **sections)

    return build


@asynccontextmanager
async def serving(config: Any, headers: dict[str, str] = AUTH) -> AsyncIterator[tuple[GatewayServer, httpx.AsyncClient]]:
    async with GatewayServer(config, access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as client:
            yield server, client


def transcript(workspace: Path, key: str) -> list[dict[str, Any]]:
    from lucidgate.memory.naming import session_file_stem

    return load_session_file(workspace / "sessions" / f"{session_file_stem(key)}.jsonl").messages


def body(text: str = "hello", chat: str = "c1", sender: str = "u1", **extra: Any) -> dict[str, Any]:
    return {"chat_id": chat, "sender_id": sender, "text": text, **extra}


# ----------------------------------------------------------------------------- happy paths


async def test_wait_true_returns_the_reply_and_persists_the_turn(wh_config, fake_llm, workspace):
    fake_llm.queue(Reply("hi there"))
    async with serving(wh_config()) as (_, client):
        r = await client.post("/v1/messages", json=body("hello"))
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["reply"] == "hi there" and data["session"] == "webhook:c1" and data["error"] is False
    assert len(data["message_id"]) == 32
    assert len(fake_llm.requests) == 1
    assert fake_llm.last_user_text().endswith("hello")
    lines = transcript(workspace, "webhook:c1")
    assert [(m["role"], m["content"]) for m in lines] == [("user", "hello"), ("assistant", "hi there")]
    assert lines[0]["message_id"] == data["message_id"] and lines[0]["sender_id"] == "u1"


async def test_wait_false_answers_202_and_posts_a_signed_callback(wh_config, fake_llm):
    fake_llm.queue(Reply("later answer"))
    async with CallbackSink() as sink, serving(wh_config()) as (_, client):
        r = await client.post("/v1/messages", json=body(wait=False, callback_url=sink.url))
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["status"] == "accepted" and accepted["session"] == "webhook:c1"
        await sink.wait_for(1)
    entry = sink.received[0]
    assert signature_ok(entry)
    assert not signature_ok(entry, secret="another-secret-0123")
    headers = {k.lower(): v for k, v in entry["headers"].items()}
    assert abs(int(headers["x-lucid-timestamp"]) - time.time()) < 30
    payload = sink.payload(0)
    assert payload["reply"] == "later answer" and payload["message_id"] == accepted["message_id"]
    assert payload["delivery_id"] == headers["x-lucid-delivery"] and payload["error"] is False
    assert len(sink.received) == 1


async def test_files_the_assistant_sends_ride_in_the_signed_callback_as_base64(wh_config, fake_llm, workspace):
    (workspace / "report.txt").write_bytes(b"quarterly numbers\n")
    fake_llm.queue(ToolCalls([("message", {"text": "the report", "files": ["report.txt"]})]),
                   Reply("sent it"))
    config = wh_config(webhook={"owners": ["u1"]})
    async with CallbackSink() as sink, serving(config, OWNER_AUTH) as (server, client):
        r = await client.post("/v1/messages", json=body("send the report", wait=False, callback_url=sink.url))
        assert r.status_code == 202, r.text
        await sink.wait_for(2)
        schema = (await client.get("/openapi.json")).json()
    with_file, answer = sink.payload(0), sink.payload(1)
    assert signature_ok(sink.received[0])
    assert [(f["name"], f["path"], f["size"], base64.b64decode(f["content_base64"])) for f in with_file["files"]] \
        == [("report.txt", "report.txt", 18, b"quarterly numbers\n")]
    assert with_file["reply"] == "the report" and with_file["message_id"] is None
    assert answer["reply"] == "sent it" and "files" not in answer
    callback = schema["paths"]["/v1/messages"]["post"]["callbacks"]
    assert "CallbackBody" in json.dumps(callback) and "content_base64" in json.dumps(schema["components"])


async def test_an_agents_reply_carries_its_own_files_and_never_another_agents(wh_config, fake_llm, tmp_path):
    """Issue 41: agent "work" (bound to chat w1) sends a file from its own workspace and it
    arrives in the callback; naming a file of "home" (by a relative or an absolute path) is
    refused and nothing of home's leaves."""
    home, work = tmp_path / "home", tmp_path / "work"
    for ws in (home, work):
        ws.mkdir()
    (work / "plan.txt").write_bytes(b"work plan\n")
    (home / "secret.txt").write_bytes(b"home secret 7319\n")
    fake_llm.queue(ToolCalls([("message", {"text": "the plan", "files": ["plan.txt"]})]), Reply("sent it"),
                   ToolCalls([("message", {"text": "a", "files": ["../home/secret.txt"]}),
                              ("message", {"text": "b", "files": [str(home / "secret.txt")]})]),
                   Reply("could not"))
    config = wh_config(webhook={"owners": ["u1"]},
                       agents={"list": [{"id": "home", "workspace": str(home)},
                                        {"id": "work", "workspace": str(work), "owners": {"webhook": ["u1"]}}]},
                       bindings=[{"agent": "work", "match": {"channel": "webhook", "chat": "w1"}}])
    async with CallbackSink() as sink, serving(config, OWNER_AUTH) as (_, client):
        for text in ("send the plan", "send home's secret"):
            r = await client.post("/v1/messages", json=body(text, chat="w1", wait=False, callback_url=sink.url))
            assert r.status_code == 202, r.text
            await sink.wait_for(len(sink.received) + 2 if text == "send the plan" else 3)
    payloads = [sink.payload(i) for i in range(len(sink.received))]
    assert [p["reply"] for p in payloads] == ["the plan", "sent it", "could not"]
    assert [(f["path"], base64.b64decode(f["content_base64"])) for f in payloads[0]["files"]] == \
        [("plan.txt", b"work plan\n")]
    assert all("files" not in p for p in payloads[1:])
    refusals = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"][-2:]
    assert all("outside" in r and "7319" not in r for r in refusals), refusals
    assert all(b"7319" not in entry["body"] for entry in sink.received)


async def test_wait_timeout_gives_504_then_the_answer_goes_to_the_callback(wh_config, fake_llm):
    fake_llm.latency = 1.0
    async with CallbackSink() as sink, serving(wh_config({"waitTimeoutS": 0.3})) as (server, client):
        r = await client.post("/v1/messages", json=body("slow one", callback_url=sink.url))
        assert r.status_code == 504, r.text  # a 200 would mean it waited for the turn
        detail = r.json()
        assert "callback_url" in detail["detail"] and detail["session"] == "webhook:c1"
        await sink.wait_for(1)
        assert sink.payload(0)["message_id"] == detail["message_id"]
        assert sink.payload(0)["reply"].endswith("slow one")
        # The answer was delivered once; with every lane settled, nothing more is on its way.
        await server.state.gateway.parts.bus.flush_outbound()
    assert len(sink.received) == 1 and len(fake_llm.requests) == 1


async def test_wait_timeout_without_callback_still_persists_the_answer(wh_config, fake_llm, workspace):
    fake_llm.latency = 0.6
    async with serving(wh_config({"waitTimeoutS": 0.2})) as (server, client):
        r = await client.post("/v1/messages", json=body("no callback"))
        assert r.status_code == 504
        assert "GET /v1/sessions/webhook:c1" in r.json()["detail"]
        await server.state.gateway.parts.agent.idle()
        detail = (await client.get("/v1/sessions/webhook:c1")).json()
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]
    assert detail["pending"] is False


async def test_client_disconnect_mid_wait_turn_completes_and_calls_back(wh_config, fake_llm, workspace):
    fake_llm.latency = 0.8
    async with CallbackSink() as sink, serving(wh_config()) as (server, client):
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/messages", json=body("bye", callback_url=sink.url), timeout=0.3)
        await sink.wait_for(1)
        await server.state.gateway.parts.agent.idle()
    assert sink.payload(0)["reply"].endswith("bye")
    roles = [m["role"] for m in transcript(workspace, "webhook:c1")]
    assert roles == ["user", "assistant"]
    assert len(fake_llm.requests) == 1


async def test_a_text_of_only_whitespace_is_refused_before_any_turn(wh_config, fake_llm):
    async with serving(wh_config()) as (_, client):
        r = await client.post("/v1/messages", json=body(" \n\t "))
    assert r.status_code == 422 and fake_llm.requests == []


async def test_llm_failure_is_an_error_reply_not_a_crash(wh_config, fake_llm):
    from tests.fakes.llm import Fail

    fake_llm.queue(*[Fail(401, "bad key")] * 5)
    async with serving(wh_config()) as (_, client):
        r = await client.post("/v1/messages", json=body())
        assert (await client.get("/healthz")).status_code == 200  # still serving
    assert r.status_code == 502  # the turn failed: a status a client or a monitor can see
    assert r.json()["error"] is True
    assert "providers.openai.apiKey" in r.json()["reply"]  # the reply names the key to fix
    assert len(fake_llm.requests) == 1  # a refused key is not retried


async def test_owner_gets_tools_and_guest_does_not(wh_config, fake_llm):
    async with serving(wh_config({"owners": ["boss"]})) as (_, client):
        assert (await client.post("/v1/messages", json=body(chat="a", sender="boss"), headers=OWNER_AUTH)).status_code == 200
        assert (await client.post("/v1/messages", json=body(chat="b", sender="stranger"))).status_code == 200
    owner_req, guest_req = fake_llm.requests
    owner_tools = {t["function"]["name"] for t in owner_req.get("tools", [])}
    assert "exec" in owner_tools and "read_file" in owner_tools
    assert not guest_req.get("tools")


# ----------------------------------------------------------------------------- errors


async def test_auth_errors(wh_config, fake_llm):
    async with serving(wh_config()) as (server, _):
        async with httpx.AsyncClient(base_url=server.url) as anon:
            cases = [
                {}, {"Authorization": ""}, {"Authorization": "Bearer"}, {"Authorization": "Bearer  \t ."},
                {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"},
                {"Authorization": "Bearer wrong"}, {"Authorization": f"bearer{TOKEN}"},
                {"Authorization": "Bearer \u00e9\u00e9".encode("latin-1")},
                {"Authorization": f"Bearer {TOKEN[:-1]}"},
            ]
            for headers in cases:
                r = await anon.post("/v1/messages", json=body(), headers=headers)
                assert r.status_code == 401, (headers, r.text)
                assert r.headers["www-authenticate"] == "Bearer" and r.json()["detail"]
            # Authentication comes before anything about the body.
            r = await anon.post("/v1/messages", content=b"{not json")
            assert r.status_code == 401
            r = await anon.post("/v1/messages", content=b"x" * 3_000_000)
            assert r.status_code == 401
            for path in ("/v1/sessions", "/v1/sessions/webhook:c1"):
                assert (await anon.get(path)).status_code == 401
            assert (await anon.delete("/v1/sessions/webhook:c1")).status_code == 401
            # The scheme name is case-insensitive, the token is not.
            r = await anon.post("/v1/messages", json=body(), headers={"Authorization": f"bEaReR {TOKEN}"})
            assert r.status_code == 200
    assert len(fake_llm.requests) == 1


async def test_empty_token_disables_the_endpoint(wh_config, fake_llm):
    async with serving(wh_config({"token": ""})) as (server, client):
        r = await client.post("/v1/messages", json=body())
        assert r.status_code == 503
        assert "channels.webhook.token is empty" in r.json()["detail"]
        async with httpx.AsyncClient(base_url=server.url) as anon:
            assert (await anon.post("/v1/messages", json=body())).status_code == 503
    assert fake_llm.requests == []


async def test_a_text_over_max_message_chars_is_413_and_never_queued(wh_config, fake_llm):
    config = wh_config(agents={"defaults": {"maxMessageChars": 50}})
    async with serving(config) as (_, client):
        r = await client.post("/v1/messages", json=body("z" * 51, wait=True))
        assert r.status_code == 413
        assert "51 characters" in r.json()["detail"] and "maxMessageChars" in r.json()["detail"]
        ok = await client.post("/v1/messages", json=body("z" * 50, wait=True))
        assert ok.status_code == 200
    assert len(fake_llm.requests) == 1  # the refused text never reached the model
    assert all("z" * 51 not in json.dumps(m) for m in transcript(config.workspace, "webhook:c1"))


async def test_body_limit_is_enforced_on_the_stream(wh_config, fake_llm):
    limit = 4096
    async with serving(wh_config({"maxBodyBytes": limit})) as (_, client):
        r = await client.post("/v1/messages", content=b"x" * 10_000_000,
                              headers={"content-type": "application/json"})
        assert r.status_code == 413 and "maxBodyBytes" in r.json()["detail"]

        async def chunks(total: int, size: int = 65536):
            sent = 0
            while sent < total:
                yield b" " * min(size, total - sent)
                sent += size

        r = await client.post("/v1/messages", content=chunks(10_000_000))
        assert r.status_code == 413 and "maxBodyBytes" in r.json()["detail"]
        # A chunked body just over the limit, whose Content-Length is never declared.
        big = json.dumps(body("y" * limit)).encode()

        async def once():
            yield big

        r = await client.post("/v1/messages", content=once())
        assert r.status_code == 413
        # Just under the limit is fine.
        ok = body("z" * (limit - 200))
        assert len(json.dumps(ok)) <= limit
        r = await client.post("/v1/messages", json=ok)
        assert r.status_code == 200, r.text
    assert len(fake_llm.requests) == 1


SCHEMA_ERRORS: list[tuple[bytes, str | None]] = [
    (b"{not json", None),
    (b"", None),
    (b"[1, 2]", None),
    (json.dumps({"chat_id": 1, "sender_id": "u", "text": "t"}).encode(), "chat_id"),
    (json.dumps({"chat_id": "c", "sender_id": "u", "text": None}).encode(), "text"),
    (json.dumps({"chat_id": "c", "sender_id": "u", "text": "t", "wait": "yes"}).encode(), "wait"),
    (json.dumps({"chat_id": "c", "sender_id": "u", "text": "t", "wait": 1}).encode(), "wait"),
    (json.dumps({"chat_id": "c", "sender_id": "u", "text": ""}).encode(), "text"),
    (json.dumps({"chat_id": "c", "sender_id": "u"}).encode(), "text"),
    (json.dumps({"chat_id": "c", "sender_id": "u", "text": "t", "extra": 1}).encode(), "extra"),
    (json.dumps({"chat_id": "c\n", "sender_id": "u", "text": "t"}).encode(), "chat_id"),
    (json.dumps({"chat_id": "c", "sender_id": "u", "text": "t", "idempotency_key": ""}).encode(),
     "idempotency_key"),
    (b'{"chat_id": "c", "sender_id": "u", "text": "\\ud800"}', "text"),
]


async def test_schema_errors_are_422(wh_config, fake_llm):
    async with serving(wh_config()) as (_, client):
        for payload, field in SCHEMA_ERRORS:
            r = await client.post("/v1/messages", content=payload, headers={"content-type": "application/json"})
            assert r.status_code == 422, (payload, r.text)
            detail = r.json()["detail"]
            assert isinstance(detail, list) and detail, payload
            if field is not None:
                assert any(field in err["loc"] for err in detail), (payload, detail)
    assert fake_llm.requests == []


async def test_rate_limit_per_sender(wh_config, fake_llm):
    async with serving(wh_config({"rateLimitPerMin": 2})) as (_, client):
        for _ in range(2):
            assert (await client.post("/v1/messages", json=body(wait=False))).status_code == 202
        r = await client.post("/v1/messages", json=body(wait=False))
        assert r.status_code == 429
        assert "rateLimitPerMin" in r.json()["detail"] and int(r.headers["retry-after"]) >= 1
        assert (await client.post("/v1/messages", json=body(sender="other", wait=False))).status_code == 202


REFUSED_CALLBACKS = [
    "http://10.0.0.1/cb", "http://192.168.1.20:8080/cb", "http://169.254.169.254/latest/meta-data",
    "http://[::1]:9000/cb", "http://localhost:9000/cb", "http://127.0.0.2/cb", "http://0.0.0.0/cb",
    "http://[fe80::1]/cb", "http://[::ffff:10.0.0.1]/cb", "http://100.64.0.1/cb", "ftp://example.org/cb",
    "not a url", "http://user:pw@127.0.0.1/cb", "http:///nohost", "http://127.0.0.1:99999/cb",
]


async def test_callback_url_refuses_private_and_odd_destinations(wh_config, fake_llm):
    async with serving(wh_config({"callbackAllowHosts": ["127.0.0.1"]})) as (_, client):
        for url in REFUSED_CALLBACKS:
            r = await client.post("/v1/messages", json=body(wait=False, callback_url=url))
            assert r.status_code == 422, (url, r.text)
            assert r.json()["detail"][0]["loc"] == ["body", "callback_url"], url
        # The allow-listed host is accepted.
        r = await client.post("/v1/messages", json=body(wait=False, callback_url="http://127.0.0.1:9/cb"))
        assert r.status_code == 202
    assert len(fake_llm.requests) <= 1


async def test_callback_needs_a_callback_secret(wh_config, fake_llm):
    async with serving(wh_config({"callbackSecret": ""})) as (_, client):
        r = await client.post("/v1/messages", json=body(wait=False, callback_url="http://127.0.0.1:9/cb"))
    assert r.status_code == 422 and "callbackSecret" in r.json()["detail"][0]["msg"]


async def test_503_when_the_bus_is_closed(wh_config, fake_llm):
    async with serving(wh_config()) as (server, client):
        assert (await client.post("/v1/messages", json=body("before"))).status_code == 200
        server.state.gateway.parts.bus.close_intake()
        r = await client.post("/v1/messages", json=body(idempotency_key="k1"))
        assert r.status_code == 503 and "shutting down" in r.json()["detail"]
        r = await client.delete("/v1/sessions/webhook:c1")
        assert r.status_code == 503 and "shutting down" in r.json()["detail"]
    assert len(fake_llm.requests) == 1


async def test_503_when_the_bus_is_full_and_the_key_is_released(tmp_path, make_config, monkeypatch):
    """A full queue answers 503; the message was not accepted, so its idempotency key is free."""
    monkeypatch.setattr(webhook_module, "PUBLISH_TIMEOUT_S", 0.05)
    config = make_config(channels={"webhook": {"token": TOKEN, "callbackSecret": SECRET}})
    bus = MessageBus(maxsize=1)  # nobody consumes it
    channel = WebhookChannel(config.channels.webhook, bus, workspace=tmp_path)
    app = FastAPI()
    app.include_router(channel.router())
    await bus.start()
    await channel.start()
    try:
        async with served_client(app, headers=AUTH) as client:
            assert (await client.post("/v1/messages", json=body(wait=False))).status_code == 202
            full = await client.post("/v1/messages", json=body("second", wait=False, idempotency_key="k2"))
            await bus.consume_inbound()  # room again
            retried = await client.post("/v1/messages", json=body("second", wait=False, idempotency_key="k2"))
    finally:
        await channel.stop()
        await bus.stop()
    assert full.status_code == 503
    assert "busy" in full.json()["detail"] and full.headers["retry-after"]
    assert retried.status_code == 202
    assert bus.inbound_depth == 1


# ----------------------------------------------------------------------------- idempotency


async def test_idempotency_key_returns_the_first_result(wh_config, fake_llm):
    fake_llm.queue(Reply("first"), Reply("second"))
    async with serving(wh_config()) as (_, client):
        a = await client.post("/v1/messages", json=body(idempotency_key="k-1"))
        b = await client.post("/v1/messages", json=body(idempotency_key="k-1"))
        c = await client.post("/v1/messages", json=body(idempotency_key="k-1", wait=False))
        other = await client.post("/v1/messages", json=body("different", idempotency_key="k-1"))
    assert a.status_code == b.status_code == c.status_code == 200
    assert a.json() == b.json() == c.json() and a.json()["reply"] == "first"
    assert other.status_code == 409 and other.json()["message_id"] == a.json()["message_id"]
    assert len(fake_llm.requests) == 1


async def test_concurrent_requests_with_one_key_run_one_turn(wh_config, fake_llm, workspace):
    fake_llm.latency = 0.3
    async with serving(wh_config()) as (_, client):
        results = await asyncio.gather(*[
            client.post("/v1/messages", json=body("once", idempotency_key="same", wait=i % 2 == 0))
            for i in range(10)])
    waited = [r for r in results if r.status_code == 200]
    assert all(r.status_code in (200, 202) for r in results)
    assert len(waited) >= 5 and len({r.json()["reply"] for r in waited}) == 1
    assert len({r.json()["message_id"] for r in results}) == 1
    assert len(fake_llm.requests) == 1
    assert [m["role"] for m in transcript(workspace, "webhook:c1")] == ["user", "assistant"]


async def test_idempotency_key_expires_after_24_hours(tmp_path):
    now = [1_000_000.0]
    store = WebhookStore(tmp_path / "w.sqlite", clock=lambda: now[0])
    store.open()
    kwargs = dict(idem_key="k", fingerprint="f", session="webhook:c", chat_id="c", sender_id="u",
                  callback_url=None, want_callback=False)
    first, created = store.claim(message_id="m1", **kwargs)
    assert created
    again, created = store.claim(message_id="m2", **kwargs)
    assert not created and again.message_id == "m1"
    now[0] += 24 * 3600 + 1
    fresh, created = store.claim(message_id="m3", **kwargs)
    assert created and fresh.message_id == "m3"
    assert store.get("m1") is not None and store.get("m1").idem_key is None
    store.close()


def test_store_answer_and_give_up_waiting_never_lose_the_callback(tmp_path):
    store = WebhookStore(tmp_path / "w.sqlite")
    store.open()
    common = dict(idem_key=None, fingerprint="f", session="webhook:c", chat_id="c", sender_id="u",
                  callback_url="http://127.0.0.1:9/cb")
    # The client gave up first: the answer then wants a callback.
    store.claim(message_id="a", want_callback=False, **common)
    assert store.want_callback("a").want_callback
    record = store.finish("a", "answer", False)
    assert record.done and record.want_callback and record.callback_url == "http://127.0.0.1:9/cb"
    # The answer came first: giving up returns it, and the answer wanted no callback.
    store.claim(message_id="b", want_callback=False, **common)
    assert not store.finish("b", "answer b", False).want_callback
    assert store.want_callback("b").reply == "answer b"
    # A second answer to the same message keeps the first.
    assert store.finish("a", "again", False).reply == "answer"
    assert store.finish("unknown", "x", False) is None
    # Unsolicited messages go to the chat's latest callback.
    assert store.latest_callback("c") == "http://127.0.0.1:9/cb"
    assert store.latest_callback("unknown") is None
    store.close()


def _legacy_table(path: Path, rows: list[tuple[str, str | None, str, float, dict[str, Any]]], url: str) -> None:
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE outbox (delivery_id TEXT PRIMARY KEY, message_id TEXT, url TEXT NOT NULL,"
               " body TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL,"
               " status TEXT NOT NULL DEFAULT 'pending', last_error TEXT, created_at REAL NOT NULL)")
    for delivery_id, message_id, status, created, data in rows:
        db.execute("INSERT INTO outbox (delivery_id, message_id, url, body, next_at, status, created_at)"
                   " VALUES (?, ?, ?, ?, 0, ?, ?)", (delivery_id, message_id, url, json.dumps(data), status, created))
    db.commit()
    db.close()


async def test_an_old_pending_callback_is_delivered_after_the_upgrade(wh_config, fake_llm, workspace):
    async with CallbackSink() as sink:
        _legacy_table(workspace / "state" / "webhook.sqlite",
                      [("d1", None, "pending", 1.0, {"chat_id": "c9", "message_id": None, "reply": "old reminder",
                                                     "error": False})], sink.url)
        store = WebhookStore(workspace / "state" / "webhook.sqlite")  # the chat's callback is on record
        store.claim(message_id="m0", idem_key=None, fingerprint="f", session="webhook:c9", chat_id="c9",
                    sender_id="u", callback_url=sink.url, want_callback=False)
        store.close()
        async with serving(wh_config()):
            await sink.wait_for(1)
    assert sink.payload(0)["reply"] == "old reminder" and signature_ok(sink.received[0])
    assert fake_llm.requests == []


def test_pending_callbacks_of_the_old_table_are_handed_over_once(tmp_path):
    import sqlite3

    path = tmp_path / "w.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE outbox (delivery_id TEXT PRIMARY KEY, message_id TEXT, url TEXT NOT NULL,"
               " body TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL,"
               " status TEXT NOT NULL DEFAULT 'pending', last_error TEXT, created_at REAL NOT NULL)")
    rows = [("d1", "m1", "pending", 1.0, {"chat_id": "c", "message_id": "m1", "reply": "one", "error": False}),
            ("d2", None, "pending", 2.0, {"chat_id": "c", "message_id": None, "reply": "two", "error": True}),
            ("d3", "m3", "delivered", 0.5, {"chat_id": "c", "message_id": "m3", "reply": "sent", "error": False})]
    for delivery_id, message_id, status, created, data in rows:
        db.execute("INSERT INTO outbox (delivery_id, message_id, url, body, next_at, status, created_at)"
                   " VALUES (?, ?, 'http://h/cb', ?, 0, ?, ?)", (delivery_id, message_id, json.dumps(data),
                                                                   status, created))
    db.commit()
    db.close()
    store = WebhookStore(path)
    store.open()
    taken = store.take_legacy_deliveries()
    assert [(t.message_id, t.reply, t.is_error, t.url) for t in taken] == [
        ("m1", "one", False, "http://h/cb"), (None, "two", True, "http://h/cb")]
    assert store.take_legacy_deliveries() == []  # the old table is gone
    store.close()


# ----------------------------------------------------------------------------- callbacks


async def test_callback_retried_through_timeout_and_500_then_delivered(wh_config, fake_llm):
    config = wh_config({"callbackTimeoutS": 0.3, "callbackMaxAttempts": 5})
    async with CallbackSink() as sink, serving(config) as (server, client):
        sink.script.extend(["hang", 500])
        r = await client.post("/v1/messages", json=body(wait=False, callback_url=sink.url))
        assert r.status_code == 202
        await sink.wait_for(3)
        bus = server.state.gateway.parts.bus
        async def delivered() -> bool:  # the third attempt was accepted
            return (await bus.outbox_counts())["delivered"] == 1

        await until_async(delivered, timeout=30, what="the callback delivered")
    ids = {entry["headers"]["X-Lucid-Delivery"] for entry in sink.received}
    assert len(sink.received) == 3 and len(ids) == 1
    assert all(signature_ok(entry) for entry in sink.received)
    assert len({entry["body"] for entry in sink.received}) == 1


async def test_callback_given_up_after_max_attempts(wh_config, fake_llm, workspace, caplog):
    caplog.set_level(logging.INFO)
    config = wh_config({"callbackMaxAttempts": 3})
    async with CallbackSink() as sink, serving(config) as (server, client):
        sink.default = 500
        await client.post("/v1/messages", json=body(wait=False, callback_url=sink.url))
        bus = server.state.gateway.parts.bus
        async def dead() -> bool:
            return (await bus.outbox_counts())["dead"] == 1

        await until_async(dead, timeout=30, what="the callback dead-lettered")
        await bus.flush_outbound()  # nothing is left to try: a fourth attempt cannot come
    assert len(sink.received) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "dead-lettered" in warnings[0]  # one line, from the outbox
    assert "gave up after 3 attempts" in warnings[0] and "HTTP 500" in warnings[0]
    assert "/cb" not in warnings[0]  # only scheme://host:port is logged


async def test_pending_callbacks_survive_a_restart(wh_config, fake_llm, workspace):
    config = wh_config({"callbackBackoffS": 60, "callbackMaxAttempts": 5})
    async with CallbackSink() as sink:
        sink.default = 503
        async with serving(config) as (server, client):
            await client.post("/v1/messages", json=body("keep me", wait=False, callback_url=sink.url))
            await sink.wait_for(1)
            outbox = server.state.gateway.parts.bus.outbox
            async def attempted() -> bool:  # the failed attempt is on record; the next is 60 s away
                return any(i.attempts >= 1 for i in await asyncio.to_thread(outbox.pending, "webhook"))

            await until_async(attempted, timeout=30, what="the failed attempt on record")
        assert len(sink.received) == 1
        sink.default = 200
        async with serving(config):
            await sink.wait_for(2, timeout=30)
    assert sink.payload(1)["reply"].endswith("keep me")
    assert sink.payload(0)["delivery_id"] == sink.payload(1)["delivery_id"]
    assert len(fake_llm.requests) == 1


# ----------------------------------------------------------------------------- sessions API


async def test_sessions_api_lists_reads_and_resets(wh_config, fake_llm, workspace):
    async with serving(wh_config()) as (server, client):
        await client.post("/v1/messages", json=body("one", chat="alpha"))
        await client.post("/v1/messages", json=body("two", chat="beta"))
        await server.state.gateway.parts.sessions.get("telegram:42", origin={"channel": "telegram", "chat_id": "42"})
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert {s["key"] for s in listed} == {"webhook:alpha", "webhook:beta"}
        assert {s["chat_id"] for s in listed} == {"alpha", "beta"}
        # updated_at follows the last message, not the header written at creation.
        alpha_file = workspace / "sessions" / "webhook_alpha.jsonl"
        os.utime(alpha_file, (1_700_000_000, 1_700_000_000))
        stale = {s["key"]: s["updated_at"] for s in (await client.get("/v1/sessions")).json()["sessions"]}
        assert stale["webhook:alpha"].startswith("2023-11-14")
        await client.post("/v1/messages", json=body("three", chat="alpha"))
        fresh = (await client.get("/v1/sessions")).json()["sessions"]
        assert fresh[0]["key"] == "webhook:alpha" and fresh[0]["updated_at"] > stale["webhook:beta"]

        detail = (await client.get("/v1/sessions/webhook:alpha")).json()
        assert [m["content"] for m in detail["messages"]][0] == "one" and not detail["pending"]
        limited = (await client.get("/v1/sessions/webhook:alpha", params={"limit": 1})).json()
        assert [m["role"] for m in limited["messages"]] == ["assistant"]

        for missing in ("/v1/sessions/webhook:nope", "/v1/sessions/telegram:42", "/v1/sessions/webhook:"):
            r = await client.get(missing)
            assert r.status_code == 404 and r.json()["detail"]
        assert (await client.delete("/v1/sessions/webhook:nope")).status_code == 404
        assert (await client.get("/v1/sessions", params={"limit": 0})).status_code == 422

        r = await client.delete("/v1/sessions/webhook:alpha")
        assert r.status_code == 200 and "fresh" in r.json()["reply"]
        after = (await client.get("/v1/sessions/webhook:alpha")).json()
        assert after["messages"] == []
    archived = list((workspace / "sessions").glob("webhook_alpha*.old"))
    assert len(archived) == 1


async def test_delete_is_ordered_after_the_sessions_running_turn(wh_config, fake_llm, workspace):
    fake_llm.latency = 0.4
    async with serving(wh_config()) as (_, client):
        await client.post("/v1/messages", json=body("warm up"))
        r = await client.post("/v1/messages", json=body("in flight", wait=False))
        assert r.status_code == 202
        reset = await client.delete("/v1/sessions/webhook:c1")
        assert reset.status_code == 200
    # The turn ran to the end before /new archived the session: its answer is in the old file.
    old = sorted((workspace / "sessions").glob("webhook_c1*.old"))
    assert len(old) == 1
    messages = load_session_file(old[0]).messages
    assert [m["content"] for m in messages if m["role"] == "user"] == ["warm up", "in flight"]
    assert messages[-1]["role"] == "assistant" and messages[-1]["content"].endswith("in flight")
    assert transcript(workspace, "webhook:c1") == []


# ----------------------------------------------------------------------------- load


async def test_200_concurrent_requests_across_50_sessions(wh_config, fake_llm, workspace):
    """Slow LLM; half the sessions post in order with wait=false, half in parallel with wait=true."""
    fake_llm.latency = 0.2
    async with serving(wh_config()) as (server, client):

        async def ordered(session: int) -> list[int]:
            codes = []
            for n in range(4):
                r = await client.post("/v1/messages", json=body(f"s{session}-m{n}", chat=f"s{session}",
                                                               sender=f"u{session}", wait=False))
                codes.append(r.status_code)
            return codes

        async def parallel(session: int) -> list[int]:
            texts = [f"s{session}-p{n}" for n in range(4)]
            rs = await asyncio.gather(*[client.post("/v1/messages", json=body(t, chat=f"s{session}",
                                                                              sender=f"u{session}"))
                                        for t in texts])
            for text, r in zip(texts, rs):
                assert r.status_code == 200, r.text
                assert r.json()["reply"].endswith(text)
            return [r.status_code for r in rs]

        async def health_probes() -> list[int]:
            """While the load runs, on a connection of its own: the server keeps answering.
            Each probe notes how many LLM requests had arrived when it was answered."""
            seen = []
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as probe:
                await fake_llm.wait_for_requests(1)
                for _ in range(5):
                    assert (await probe.get("/healthz")).status_code == 200
                    seen.append(len(fake_llm.requests))
            return seen

        jobs = [ordered(i) for i in range(25)] + [parallel(i) for i in range(25, 50)]
        *results, probes = await asyncio.gather(*jobs, health_probes())
        assert all(code in (200, 202) for codes in results for code in codes)
        # Answered while turns were still running, not queued behind them (no wall-clock bound:
        # under load every answer is slower, but it must not wait for the load to finish).
        assert min(probes) < 200, probes
        await server.state.gateway.parts.agent.idle()
    assert len(fake_llm.requests) == 200
    for i in range(50):
        messages = transcript(workspace, f"webhook:s{i}")
        users = [m["content"] for m in messages if m["role"] == "user"]
        assert len(users) == 4 and len(messages) == 8
        if i < 25:
            assert users == [f"s{i}-m{n}" for n in range(4)]
        for user, answer in zip(messages[::2], messages[1::2]):
            assert user["role"] == "user" and answer["role"] == "assistant"
            assert answer["content"].endswith(user["content"])


async def test_a_dns_hiccup_at_delivery_is_retried_not_given_up() -> None:
    import socket

    from lucidgate.channels._ratelimit import DeliveryRetry
    from lucidgate.channels.webhook.callbacks import CallbackPoster

    loop = asyncio.get_running_loop()

    async def resolver_down(*args: Any, **kwargs: Any) -> Any:  # EAI_AGAIN: "try again later"
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    loop.getaddrinfo = resolver_down  # type: ignore[method-assign]
    poster = CallbackPoster(secret="s" * 16, allow_hosts=[], timeout_s=1, max_attempts=8, backoff_s=0.05)
    await poster.start()
    try:
        for attempt in range(1, 4):  # backing off, not failed after one try
            with pytest.raises(DeliveryRetry) as retry:
                await poster.post("https://hooks.example.com/cb", b"{}", delivery_id="d1", message_id="m1")
            assert retry.value.after_s is not None and retry.value.after_s >= 0.05 * 2 ** (attempt - 1)
    finally:
        await poster.stop()
        del loop.getaddrinfo


async def test_a_429_retry_after_is_honoured(wh_config, fake_llm):
    config = wh_config({"callbackBackoffS": 0.01})
    async with CallbackSink() as sink, serving(config) as (server, client):
        sink.script.append(429)
        sink.retry_after = "1"
        await client.post("/v1/messages", json=body(wait=False, callback_url=sink.url))
        await sink.wait_for(2)
    first, second = sink.received[0]["at"], sink.received[1]["at"]
    assert second - first >= 0.9  # not the 0.01 s backoff: the receiver asked for a second


async def test_expired_records_are_purged_while_running(tmp_path: Path, make_config: Any) -> None:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.channels.webhook import WebhookChannel
    from lucidgate.channels.webhook.store import IDEMPOTENCY_TTL_S, WebhookStore

    now = [1_000_000.0]
    store = WebhookStore(tmp_path / "wh.sqlite", clock=lambda: now[0])
    config = make_config(api_base="http://127.0.0.1:9/v1", channels={"webhook": {"token": TOKEN}})
    bus = MessageBus()
    await bus.start()
    channel = WebhookChannel(config.channels.webhook, bus, workspace=tmp_path, store=store,
                             purge_interval_s=0.05)
    await channel.start()
    try:
        store.claim(message_id="old", idem_key="k", fingerprint="f", session="webhook:c", chat_id="c",
                    sender_id="u", callback_url=None, want_callback=False)
        store.finish("old", "answered long ago", False)
        count = "SELECT COUNT(*) FROM requests"
        assert store._conn().execute(count).fetchone()[0] == 1
        now[0] += IDEMPOTENCY_TTL_S + 60  # a day and a minute later, the gateway still running
        await until(lambda: store._conn().execute(count).fetchone()[0] == 0, timeout=30,
                    what="the expired request purged")
    finally:
        await channel.stop()
        await bus.stop()


async def test_a_waiting_request_is_answered_while_an_earlier_callback_backs_off(wh_config, fake_llm):
    """Callbacks keep per-chat order in the outbox lane, but an answer someone waits for on
    the open HTTP request never queues behind a failing callback of the same chat."""
    config = wh_config({"callbackBackoffS": 30, "callbackMaxAttempts": 5, "waitTimeoutS": 20})
    async with CallbackSink() as sink, serving(config) as (server, client):
        sink.default = 503  # the receiver is down: the first answer's callback backs off for 30 s
        first = await client.post("/v1/messages", json=body("first", wait=False, callback_url=sink.url))
        assert first.status_code == 202
        await sink.wait_for(1)
        second = await client.post("/v1/messages", json=body("second"))  # same chat, waits for its answer
        assert second.status_code == 200 and second.json()["reply"].endswith("second")
        assert len(sink.received) == 1  # the callback is still backing off, in order
