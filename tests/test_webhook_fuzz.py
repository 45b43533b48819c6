"""Property test of ``POST /v1/messages``: the endpoint accepts a body exactly when the
served OpenAPI schema says it is valid, and nothing malformed ever produces a 5xx.

The gateway runs for the whole module in a thread of its own (a real uvicorn server on
loopback, the fake LLM in another thread), so Hypothesis can drive it with a plain client.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lucidgate.config import Config
from lucidgate.gateway.daemon.serve import GatewayServer
from tests.fakes.llm import FakeLLMServer
from tests.test_server import _validator
from tests.test_webhook import AUTH, TOKEN

FIELDS = ("chat_id", "sender_id", "text", "idempotency_key", "callback_url", "wait")


class ThreadedGateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway-under-fuzz", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with GatewayServer(self.config, access_log=False) as server:
                self.url = server.url
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start()
            self._failure = exc
            self._ready.set()

    def start(self) -> ThreadedGateway:
        self._thread.start()
        if not self._ready.wait(60) or self._failure is not None:
            raise RuntimeError(f"the gateway did not start: {self._failure!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, dict[str, Any]]]:
    llm = FakeLLMServer().start_in_thread()
    workspace: Path = tmp_path_factory.mktemp("fuzz") / "workspace"
    config = Config.model_validate({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                "llmRetryBaseDelayS": 0.01, "llmTimeoutS": 10}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": llm.base_url}},
        "channels": {"webhook": {"token": TOKEN, "callbackSecret": "fuzz-secret-123456",
                                 "rateLimitPerMin": 100000, "rateLimitPerCredentialPerMin": 100000,
                                 "rateLimitGlobalPerMin": 100000, "waitTimeoutS": 20}},
        "gateway": {"port": 0, "shutdownGraceS": 1},
    })
    gateway = ThreadedGateway(config).start()
    try:
        with httpx.Client(base_url=gateway.url, headers=AUTH, timeout=30) as client:
            spec = client.get("/openapi.json").json()
            yield client, spec
    finally:
        gateway.stop()
        llm.stop_thread()


scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
junk = scalars | st.text(max_size=8) | st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=5), scalars,
                                                                                      max_size=2)
# Values of the right type (ids may still hold control characters, which the schema's
# pattern refuses); callback_url stays out of the agreement property: a well-formed URL can
# still be refused for where it points, a check no schema can express (see test_webhook).
printable = st.characters(min_codepoint=32, exclude_categories=("Cs",))
ids = st.text(printable, min_size=1, max_size=24) | st.text(max_size=24)
plausible = {
    "chat_id": ids,
    "sender_id": ids,
    "text": st.text(min_size=1, max_size=60) | st.text(max_size=2),
    "idempotency_key": st.none() | st.text(max_size=6),
    "callback_url": st.none(),
    "wait": st.booleans(),
}


@st.composite
def request_bodies(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 19)) == 0:
        return draw(junk)
    obj: dict[str, Any] = {}
    for field in FIELDS:
        # Mostly-valid bodies, so both sides of the property get exercised.
        if draw(st.integers(0, 19)) < (19 if field in ("chat_id", "sender_id", "text") else 8):
            good = draw(st.integers(0, 19)) < 18
            obj[field] = draw(plausible[field] if good else junk)
    if draw(st.integers(0, 19)) == 0:
        obj[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in FIELDS))] = draw(scalars)
    return obj


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(payload=request_bodies())
def test_the_endpoint_accepts_exactly_what_the_schema_allows(live, payload):
    client, spec = live
    operation = spec["paths"]["/v1/messages"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    valid = _validator(spec, schema).is_valid(payload)
    r = client.post("/v1/messages", content=json.dumps(payload, ensure_ascii=True),
                    headers={"content-type": "application/json"})
    assert r.status_code < 500, r.text
    assert str(r.status_code) in operation["responses"], r.status_code
    event(f"schema-valid={valid} status={r.status_code}")
    if not valid:
        assert r.status_code == 422, (payload, r.text)
        return
    if r.status_code == 422 and payload.get("callback_url") is not None:
        # A junk string the schema allows (the scheme and the host are checked on the value,
        # which no schema can fully express): refused by that check alone, nothing else.
        assert [e["loc"] for e in r.json()["detail"]] == [["body", "callback_url"]], (payload, r.text)
        return
    if r.status_code == 409:  # a key Hypothesis happened to reuse with another text
        assert payload.get("idempotency_key") is not None
        return
    assert r.status_code in (200, 202), (payload, r.text)
    data = r.json()
    if r.status_code == 200 and data["reply"] and not data["error"]:
        assert data["session"] == f"webhook:{payload['chat_id']}"


@settings(max_examples=25, deadline=None)
@given(field=st.sampled_from(["chat_id", "sender_id", "text", "idempotency_key", "callback_url"]),
       surrogate=st.integers(0xD800, 0xDFFF))
def test_lone_surrogates_are_a_422_not_a_crash(live, field, surrogate):
    client, _ = live
    payload = {"chat_id": "c", "sender_id": "s", "text": "t", field: f"x{chr(surrogate)}"}
    r = client.post("/v1/messages", content=json.dumps(payload, ensure_ascii=True),
                    headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert any(field in err["loc"] for err in r.json()["detail"])
