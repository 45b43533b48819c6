"""The terminal is the owner's private chat: ``lucid agent`` (the real CLI, in its own process)
shows a held action's request and takes ``/approve`` — in a later process too, since requests
live in ``state/approvals.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_cli import lucid


@pytest.mark.slow
async def test_lucid_agent_shows_the_request_and_a_later_approve_runs_it_once(
        fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                "llmRetryBaseDelayS": 0.01}},
        "providers": {"openai": {"apiBase": fake_llm.base_url}},
        "tools": {"approvals": "always", "exec": {"sandbox": "off"}}}))
    fake_llm.queue(ToolCalls([("exec", {"command": "echo ran >> pwned.txt"})]), Reply("It waits for you."))
    code, out, err = await lucid("agent", "-m", "append a line", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "Approval needed" in out and "echo ran >> pwned.txt" in out, out
    assert not (workspace / "pwned.txt").exists()
    match = re.search(r"Approval needed — id (\S+)", out)
    assert match is not None

    code, out, err = await lucid("agent", "-m", f"/deny {match.group(1)[:-1]}", "--config", str(config), home=tmp_path)
    assert code == 0 and "No pending approval request" in out, out + err
    code, out, err = await lucid("agent", "-m", f"/approve {match.group(1)}", "--config", str(config), home=tmp_path)
    assert code == 0 and "ran once" in out, out + err
    assert (workspace / "pwned.txt").read_text() == "ran\n"
    code, out, err = await lucid("agent", "-m", f"/approve {match.group(1)}", "--config", str(config), home=tmp_path)
    assert code == 0 and "No pending approval request" in out, out + err
    assert (workspace / "pwned.txt").read_text() == "ran\n"
