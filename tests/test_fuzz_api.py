"""Hostile inputs, generated: schemathesis fuzzes every HTTP operation of the running gateway
from its own OpenAPI schema (issue 11, item 13).

The real gateway serves on 127.0.0.1 (uvicorn, port 0) with the webhook, the OpenAI-compatible
endpoint and the console; schemathesis generates requests that fit the schema (positive) and
requests that break it (negative: wrong types, missing fields, oversized strings), sends them
over real HTTP with the webhook's bearer token, and the test asserts the one property that
must hold for any input: never a 5xx, and the daemon keeps serving afterwards. Bounded
example counts keep it to well under a minute; ``LUCID_FUZZ_EXAMPLES`` raises them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import httpx
import hypothesis
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from tests.fakes.llm import FakeLLMServer
from tests.test_webhook import AUTH, serving, wh_config  # noqa: F401  (fixture)

EXAMPLES = int(os.environ.get("LUCID_FUZZ_EXAMPLES", "12"))
# Endpoints whose answer is a never-ending stream for an authorised caller; the fuzzer has no
# console cookie, so they would answer 401 at once, but the stream route is left out anyway.
STREAMS = {("GET", "/api/console/chats/{chat_id}/events")}


def fuzz(base_url: str, spec: dict[str, Any]) -> tuple[int, list[str]]:
    """Run every operation in both modes; (requests sent, failures)."""
    schema = schemathesis.openapi.from_dict(spec)
    sent, failures = 0, []
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) in STREAMS:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            def one(case: Any) -> None:
                nonlocal sent
                response = case.call(base_url=base_url, headers=dict(AUTH), timeout=180)
                sent += 1
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                    f"{response.text[:200]}")

            try:
                one()
            except hypothesis.errors.Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # no input to break (e.g. GET /healthz)
    return sent, failures


async def test_no_generated_request_gets_a_5xx_and_the_daemon_keeps_serving(
        wh_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    # A request that waits longer than waitTimeoutS is a 504 by design: the first turn (litellm's
    # own set-up, seconds on a loaded machine) is paid before fuzzing, and the wait is generous,
    # so what is checked is the input handling, not the machine's speed.
    config = wh_config({"waitTimeoutS": 120})  # the OpenAI endpoint shares the webhook token
    async with serving(config) as (server, client):
        warm = await client.post("/v1/messages", json={"chat_id": "warm", "sender_id": "u", "text": "hi"},
                                 timeout=180)
        assert warm.status_code == 200
        spec = (await client.get("/openapi.json")).json()
        sent, failures = await asyncio.to_thread(fuzz, server.url, spec)
        health = await client.get("/healthz")
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as fresh:
            after = await fresh.post("/v1/messages", json={"chat_id": "after", "sender_id": "u", "text": "still there?"})
    operations = {(m.upper(), p) for p, item in spec["paths"].items() for m in item}
    assert {("POST", "/v1/messages"), ("POST", "/v1/chat/completions")} <= operations
    assert sent >= len(operations)  # every operation was tried
    print(f"fuzz: {sent} generated requests over {len(operations)} operations, {len(failures)} answered 5xx")
    assert failures == [], "\n".join(failures[:10])
    assert health.status_code == 200 and after.status_code == 200 and after.json()["error"] is False
