"""Each built-in command is a small unit: built here with only the parts it reads (real
stores in a temporary workspace, the real model client against the fake LLM server), no
gateway around it, and judged by its reply."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.config.onboard import install_templates
from lucidgate.config.schema import Config
from lucidgate.gateway.agent.commands import CommandRegistry
from lucidgate.gateway.commands.memory import DreamLog, DreamRestore, ShowMemory
from lucidgate.gateway.commands.model import SwitchModel
from lucidgate.gateway.commands.session import Help, New
from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.gateway.model.fallback import ModelChain, SessionModels
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.sessions import Session, SessionStore
from lucidgate.memory.store import MemoryStore
from lucidgate.memory.tokens import count_messages
from tests.fakes.llm import FakeLLMServer, Reply


def turn(workspace: Path, *, role: str = "owner", key: str = "cli:1") -> TurnContext:
    channel, _, chat = key.partition(":")
    return TurnContext(session_key=key, channel=channel, chat_id=chat, sender_id="me", role=role,  # type: ignore[arg-type]
                       chat_type="private", workspace=workspace)


async def test_dream_log_lists_memory_commits_shows_one_and_restore_undoes_it(workspace: Path) -> None:
    install_templates(workspace)
    git = GitStore(workspace)
    git.init()
    memory_file = MemoryStore(workspace).memory_path
    before = memory_file.read_text()
    memory_file.write_text(before + "- Ana drinks green tea\n")
    sha = git.commit_manual_edits()
    assert sha is not None
    ctx = turn(workspace)

    listing = await DreamLog(git)(ctx, "")
    assert sha[:7] in listing and "manual:" in listing
    assert "+- Ana drinks green tea" in await DreamLog(git)(ctx, sha[:8])
    assert "no-such-sha" in await DreamLog(git)(ctx, "no-such-sha")

    reply = await DreamRestore(git)(ctx, sha[:8])
    assert reply.startswith(f"Restored the memory files to before {sha[:8]}")
    assert memory_file.read_text() == before
    assert (await DreamRestore(git)(ctx, "")).startswith("Usage: /dream-restore")


async def test_memory_shows_user_and_memory_files_as_they_are(workspace: Path) -> None:
    install_templates(workspace)
    store = MemoryStore(workspace)
    store.user_path.write_text("# User\nName: Ana\n")
    store.memory_path.write_text("# Memory\n- prefers green tea\n")
    reply = await ShowMemory(store, workspace=workspace)(turn(workspace), "")
    assert "USER.md\n# User\nName: Ana" in reply
    assert "MEMORY.md\n# Memory\n- prefers green tea" in reply


async def test_help_lists_owner_commands_only_to_the_owner(workspace: Path) -> None:
    registry = CommandRegistry()
    registry.register(Help(registry))
    registry.register(DreamLog(GitStore(workspace)))
    owner = await registry.dispatch(turn(workspace), "help", "")
    guest = await registry.dispatch(turn(workspace, role="guest"), "help", "")
    assert "/dream-log [sha] — list memory changes, or show one" in owner
    assert "/help — list commands" in guest and "/dream-log" not in guest
    refused = await registry.dispatch(turn(workspace, role="guest"), "dream-log", "")
    assert refused == "/dream-log is only for the owner of this assistant."


async def test_model_pins_a_preset_for_this_session_only(workspace: Path) -> None:
    config = Config.model_validate({"agents": {"defaults": {
        "workspace": str(workspace), "model": "openai/main-model",
        "modelPresets": {"fast": "openai/small-model"}}}})
    models = SessionModels(workspace / "models.json")
    command = SwitchModel(ModelChain(config, sessions=models))
    assert (await command(turn(workspace), "fast")) == "This conversation now uses fast (openai/small-model)."
    assert models.get("cli:1") == "fast" and models.get("cli:2") is None
    assert (await command(turn(workspace), "")).startswith("model: openai/small-model (preset fast)")
    assert (await command(turn(workspace), "slow")).startswith("There is no preset 'slow'.")
    reply = await command(turn(workspace), "default")
    assert reply == "This conversation uses the default model again (openai/main-model)."
    assert SessionModels(workspace / "models.json").get("cli:1") is None  # the file agrees


async def test_new_archives_the_conversation_and_leaves_a_note(
        workspace: Path, fake_llm: FakeLLMServer, make_config: Callable[..., Config]) -> None:
    install_templates(workspace)
    fake_llm.default = lambda body: Reply("- Ana asked about tea and chose green")
    model = LiteLLMChatModel(make_config())
    sessions, store = SessionStore(workspace / "sessions"), MemoryStore(workspace)

    async def estimate(session: Session) -> int:
        return await asyncio.to_thread(count_messages, session.active())

    consolidator = Consolidator(sessions, store, model, estimate=estimate, budget=100_000)
    new = New(sessions, store, consolidator, workspace=workspace, session_notes=True)
    try:
        session = await sessions.get("cli:1")
        said: list[dict[str, Any]] = [{"role": "user", "content": "Which tea is best?", "sender_id": "me"},
                                      {"role": "assistant", "content": "Green, for you."}]
        await sessions.append(session, *said, sync=True)

        reply = await new(turn(workspace), "")
        assert reply.startswith("Started a fresh conversation; the previous 2 message(s) went to memory.")
        note = reply.split("A note of it is in ")[1].rstrip(".")
        assert "Which tea is best?" in (workspace / note).read_text()
        assert "Ana asked about tea and chose green" in (workspace / "memory" / "history.jsonl").read_text()
        assert (await sessions.get("cli:1")).messages == []
        assert await new(turn(workspace), "") == "Started a fresh conversation."
    finally:
        model.close()
