"""Fixtures of the real-model suite: one stock llama.cpp server for the whole session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real_model.llama_server import LlamaServer, find_gguf, missing_reason


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    reason = missing_reason()
    gguf = find_gguf()
    if reason is not None or gguf is None:  # the test module skips before this; belt and braces
        pytest.skip(reason or "no model")
    server = LlamaServer(gguf, tmp_path_factory.mktemp("llama") / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty workspace at the same path for every test of this worker.

    The path is in the system prompt's first lines, so with a path per test llama.cpp could
    reuse only ~60 tokens of the previous prompt and evaluated the other ~2,000 again
    (seconds each on one core). The base temp folder is the worker's own under xdist."""
    path = tmp_path_factory.getbasetemp() / "real-model-workspace"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path
