"""Auto-recall with dated windows: a window of the chat being answered is already in the
prompt and is not recalled again (its date line notwithstanding), another chat's is, and the
block stays within ``recallMaxTokens``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lucidgate.gateway.app import build_gateway
from lucidgate.memory import tokens
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, message_text
from tests.search_kit import transcript

KEYWORD_ONLY = {"memory": {"search": {"embedding": {"model": "none"}, "recallMaxTokens": 120}}}


async def test_recall_skips_this_chats_own_window_and_keeps_its_budget(
        fake_llm: FakeLLMServer, make_config: Callable, workspace: Path) -> None:
    (workspace / "sessions").mkdir(parents=True, exist_ok=True)
    (workspace / "state").mkdir(exist_ok=True)
    (workspace / "sessions" / "cli_1.jsonl").write_text(transcript("cli:1", [
        ("user", "My bike is a red Gazelle with a wicker basket."), ("assistant", "Noted.")],
        stamp="2026-11-20T10:00:00+00:00"), encoding="utf-8")
    (workspace / "sessions" / "cli_2.jsonl").write_text(transcript("cli:2", [
        ("user", "The Gazelle bike needs a new chain before the ride to Sintra. " * 6),
        ("assistant", "I will remind you about the chain.")], stamp="2026-10-02T10:00:00+00:00"),
        encoding="utf-8")
    (workspace / "state" / "owner_sessions.json").write_text(json.dumps(["cli:1", "cli:2"]))
    gw = build_gateway(make_config(agents={"defaults": KEYWORD_ONLY}))
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    fake_llm.queue(Reply("ok"))
    async with gw:
        await ch.say("what about my Gazelle bike?", sender_id="local")
        await ch.wait_replies(1, timeout=60)
    user = message_text(fake_llm.requests[0]["messages"][-1])
    assert "recalled from memory" in user, user
    block = user.split("recalled from memory", 1)[1].split("\n\n")[0]
    assert "new chain" in block  # the other chat's window is recalled
    assert "wicker basket" not in block  # this chat's window is already in the prompt
    assert tokens.count_text(block) <= 120 + 20  # the budget, plus the block's heading
