"""Oversized and malformed bodies on every endpoint that takes one, over real HTTP.

Each endpoint must refuse with a 4xx that says what is wrong — a declared length over its
limit, a chunked body that grows past it, broken JSON, the wrong JSON shape — and the
daemon must keep serving afterwards (``/healthz``) and a good request must still work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from lucidgate.gateway.daemon.serve import GatewayServer
from tests.console_kit import CONSOLE_TOKEN, WEBHOOK_TOKEN
from tests.fakes.llm import FakeLLMServer, Reply

MB = 1024 * 1024


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def chunked(total: int, piece: int = 64 * 1024) -> AsyncIterator[bytes]:
    yield b'{"text": "'
    for _ in range(total // piece):
        yield b"x" * piece
    yield b'"}'


@pytest.fixture
def hostile_config(make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> Any:
    return make_config(console={"token": CONSOLE_TOKEN},
                       channels={"webhook": {"token": WEBHOOK_TOKEN, "owners": ["me"]},
                                 "openai": {"waitTimeoutS": 20}},
                       gateway={"port": 0, "shutdownGraceS": 2})


async def test_every_body_endpoint_refuses_oversized_and_malformed_input(
        hostile_config: Any, fake_llm: FakeLLMServer) -> None:
    async with GatewayServer(hostile_config, access_log=False) as server:
        local = bearer(server.state.local_token)
        origin = {"Origin": server.url}
        endpoints: list[tuple[str, dict[str, str], int]] = [
            ("/v1/messages", bearer(WEBHOOK_TOKEN), MB),
            ("/v1/chat/completions", bearer(WEBHOOK_TOKEN), 4 * MB),
            ("/v1/local/messages", local, 4 * 1_000_000 + 1024),
            ("/v1/local/search", local, 4 * 10_000 + 1024),
            ("/api/console/login", origin, 8 * MB),
        ]
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            for path, headers, limit in endpoints:
                json_headers = {**headers, "Content-Type": "application/json"}
                declared = await client.post(path, content=b"x" * (limit + 1), headers=json_headers)
                assert declared.status_code == 413, (path, declared.status_code, declared.text[:200])
                assert "limit" in declared.text or "over" in declared.text, (path, declared.text[:200])
                streamed = await client.post(path, content=chunked(limit + 256 * 1024), headers=json_headers)
                assert streamed.status_code == 413, (path, streamed.status_code, streamed.text[:200])
                broken = await client.post(path, content=b'{"text": "unterminated', headers=json_headers)
                assert 400 <= broken.status_code < 500 and broken.status_code != 413, (path, broken.text[:200])
                assert "json" in broken.text.lower(), (path, broken.text[:200])
                shaped = await client.post(path, json=["not", "an", "object"], headers=headers)
                assert 400 <= shaped.status_code < 500, (path, shaped.text[:200])
                assert (await client.get("/healthz")).status_code == 200, path
            # Still serving, and a good request still works.
            fake_llm.queue(Reply("still here"))
            good = await client.post("/v1/messages", json={"chat_id": "c", "sender_id": "guest", "text": "hi"},
                                     headers=bearer(WEBHOOK_TOKEN))
            assert good.status_code == 200 and good.json()["reply"] == "still here"
            login = await client.post("/api/console/login", json={"token": CONSOLE_TOKEN}, headers=origin)
            assert login.status_code == 200
