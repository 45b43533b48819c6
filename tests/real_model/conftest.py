"""Fixtures of the real-model suite: one stock llama.cpp server for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

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
