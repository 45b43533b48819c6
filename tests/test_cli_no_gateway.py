"""`lucid dream`, `lucid memory forget` and `lucid memory log` work on the workspace's stores
and, for Dream, the model client alone: none of them builds a gateway, a bus, a channel or an
agent loop (gateway/app.py ``build_dream``; gateway/stores.py ``WorkspaceParts``).

Run in-process (typer's runner) so the constructors can be refused; the model is the suite's
fake OpenAI server on loopback, reached through litellm's real HTTP path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lucidgate.channels import registry
from lucidgate.channels.bus import MessageBus
from lucidgate.gateway import app
from lucidgate.gateway.agent.loop import AgentLoop
from lucidgate.gateway.cli import build_app
from lucidgate.gateway.runtime import Gateway
from lucidgate.memory.gitstore import GitStore
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_cli_memory import USER, prepare_memory, write_config


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


@pytest.fixture
def no_gateway(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make building a gateway, a bus, the channels or the agent loop fail loudly, and record it."""
    built: list[str] = []

    def refuse(what: str) -> Any:
        def init(*args: Any, **kwargs: Any) -> None:
            built.append(what)
            raise AssertionError(f"a one-off CLI command built {what}")

        return init

    monkeypatch.setattr(Gateway, "__init__", refuse("a Gateway"))
    monkeypatch.setattr(MessageBus, "__init__", refuse("a MessageBus"))
    monkeypatch.setattr(AgentLoop, "__init__", refuse("an AgentLoop"))
    monkeypatch.setattr(registry, "build_channels", refuse("the channels"))
    monkeypatch.setattr(app, "build_channels", refuse("the channels"))
    return built


def lucid(*args: str) -> str:
    result = CliRunner().invoke(build_app(), list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_dream_forget_and_memory_log_run_without_a_gateway(
        tmp_path: Path, llm: FakeLLMServer, no_gateway: list[str]) -> None:
    config, workspace = write_config(tmp_path, llm.base_url)
    prepare_memory(workspace)
    llm.queue(
        Reply("[USER] likes tea\n"),
        ToolCalls([("edit_file", {"path": "USER.md", "old_text": "- Lives in Porto\n",
                                  "new_text": "- Lives in Porto\n- Likes tea\n"})]),
        Reply("Applied one finding."),
    )

    dreamt = lucid("dream", "--config", str(config))

    assert "1 finding(s), 1 change(s)" in dreamt, dreamt
    assert (workspace / "USER.md").read_text() == USER.replace("- Lives in Porto\n", "- Lives in Porto\n- Likes tea\n")
    assert len(llm.requests) == 3  # analysis, the edit, the closing answer: Dream really ran

    forgot = lucid("memory", "forget", "Likes tea", "--yes", "--config", str(config))

    assert "Likes tea" not in (workspace / "USER.md").read_text(), forgot
    logged = lucid("memory", "log", "--config", str(config))
    assert any(c.message.startswith("dream:") for c in GitStore(workspace).log(20)), logged
    assert no_gateway == []
