"""Every memory change is a commit: the agent's file tools (one commit per turn), hand edits
(at start), daily notes — all visible in `lucid memory log` and /dream-log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.memory.gitstore import GitStore
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.waiting import until


@asynccontextmanager
async def running(config: Any) -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        yield gw, channel



async def test_a_turn_of_memory_edits_is_one_agent_commit(
    fake_llm: FakeLLMServer, make_config: Callable[..., Any], workspace: Path
) -> None:
    fake_llm.queue(
        ToolCalls([("write_file", {"path": "USER.md", "content": "# User\n\n- Name: Ada\n"})]),
        ToolCalls([("write_file", {"path": "skills/tea/SKILL.md", "content": "---\nname: tea\n---\nBrew.\n"}),
                   ("write_file", {"path": "memory/2026-11-23.md", "content": "- met Ada\n"}),
                   ("write_file", {"path": "notes/scratch.txt", "content": "not memory"})]),
        Reply("Noted."))
    async with running(make_config()) as (gw, ch):
        git = gw.parts.git
        await ch.say("I am Ada", sender_id="local")
        await ch.wait_replies(1, timeout=60)
        await until(lambda: any(c.message.startswith("agent:") for c in git.log(5)))
        fake_llm.queue(Reply("Just chatting."))
        await ch.say("how are you?", sender_id="local")
        await ch.wait_replies(2, timeout=60)
        await ch.say("/dream-log", sender_id="local")
        dream_log = (await ch.wait_replies(3, timeout=60))[2].text
    agent_commits = [c for c in git.log(20) if c.message.startswith("agent:")]
    assert len(agent_commits) == 1  # a turn that changes nothing makes no commit
    [commit] = agent_commits
    assert set(commit.files) == {"USER.md", "skills/tea/SKILL.md", "memory/2026-11-23.md"}
    assert commit.message.startswith("agent: write USER.md, write skills/tea/SKILL.md, write memory/2026-11-23.md")
    assert commit.message.endswith("(cli:1)")
    assert "notes/scratch.txt" not in commit.message
    assert commit.short in dream_log and "agent: write USER.md" in dream_log


async def test_hand_edits_are_committed_at_start_and_shown_by_memory_log(
    fake_llm: FakeLLMServer, make_config: Callable[..., Any], workspace: Path
) -> None:
    config = make_config()
    async with running(config):
        pass
    (workspace / "SOUL.md").write_text("# Soul\n\nTerse and kind.\n")
    (workspace / "memory" / "2026-11-20.md").write_text("- a hand-written daily note\n")
    async with running(config) as (gw, _):
        [latest, *_] = gw.parts.git.log(1)
    assert latest.message.startswith("manual:")
    assert set(latest.files) == {"SOUL.md", "memory/2026-11-20.md"}
    (workspace / "USER.md").write_text("# User\n\nEdited while nothing ran.\n")

    from lucidgate.gateway.cli import build_app

    config_file = workspace.parent / "config.json"
    config_file.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    result = CliRunner().invoke(build_app(), ["memory", "log", "-c", str(config_file)])
    assert result.exit_code == 0, result.output
    assert "manual: USER.md" in result.output and "manual: SOUL.md" in result.output


def test_an_old_gitignore_is_upgraded_so_daily_notes_are_versioned(workspace: Path) -> None:
    git = GitStore(workspace)
    (workspace / "memory").mkdir()
    (workspace / ".gitignore").write_text("# Written by lucidgate: old\n/*\n!/memory/\n/memory/*\n")
    git.init()
    (workspace / "memory" / "2026-01-02.md").write_text("note\n")
    (workspace / "memory" / "history.jsonl").write_text("{}\n")
    sha = git.commit("agent: write memory/2026-01-02.md")
    assert sha is not None
    assert git.log(1)[0].files == ("memory/2026-01-02.md",)
    (workspace / "memory" / "2026-01-02.md").write_text("changed\n")
    (workspace / "USER.md").write_text("hand edit\n")
    git.commit("agent: edit memory/2026-01-02.md", ["memory/2026-01-02.md"])
    assert git.log(1)[0].files == ("memory/2026-01-02.md",)  # the hand edit is not swept in
    assert git.commit_manual_edits() is not None and git.log(1)[0].files == ("USER.md",)
