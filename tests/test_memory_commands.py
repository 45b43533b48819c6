"""Memory slash commands through the real loop: /new, /memory, /forget, /dream, /dream-log,
/dream-restore, owner/private gating, and token usage in /status."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lucidgate.gateway.app import build_gateway
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls

OWNER = dict(sender_id="local")


async def test_new_archives_before_clearing(fake_llm: FakeLLMServer, make_config: Callable,
                                            workspace: Path) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    fake_llm.queue(Reply("nice to meet you"), Reply("- The user's name is Ada"))
    async with gw:
        await ch.say("my name is Ada", **OWNER)
        await ch.wait_replies(1)
        await ch.say("/new", **OWNER)
        [_, reply] = await ch.wait_replies(2)
        session = await gw.parts.sessions.get("cli:1")
    assert "2 message(s) went to memory" in reply.text
    history = [json.loads(x) for x in (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    assert history[-1]["content"].startswith("- The user's name is Ada") and history[-1]["session_key"] == "cli:1"
    assert session.messages == []
    olds = list((workspace / "sessions").glob("cli_1.*.jsonl.old"))
    assert len(olds) == 1 and "my name is Ada" in olds[0].read_text()


async def test_memory_forget_and_gating(fake_llm: FakeLLMServer, make_config: Callable, workspace: Path) -> None:
    gw = build_gateway(make_config(channels={"webhook": {"owners": ["boss"]}}))
    ch = FakeChannel(gw.parts.bus, name="webhook", owners=gw.parts.config.channels.owners_of("webhook"))
    gw.add_channel("webhook", ch)
    async with gw:
        (workspace / "USER.md").write_text("# User\n- lives in Lisbon\n- likes cats\n")
        await ch.say("/memory", sender_id="boss")
        await ch.say("/forget cats", sender_id="boss")
        await ch.say("/memory", sender_id="boss")
        await ch.say("/forget cats", sender_id="stranger")
        await ch.say("/memory", sender_id="boss", chat_type="group", chat_id="g")
        await ch.wait_replies(5)
        replies = ch.replies(chat_id="1") + ch.replies(chat_id="g")
        log = gw.parts.git.log(5)
    assert "lives in Lisbon" in replies[0].text and "likes cats" in replies[0].text
    assert replies[1].text.startswith("Forgot:\n- likes cats\n\nRemoved from:\n- USER.md: 1 line(s)")
    assert "history of changes (git) still holds" in replies[1].text and "--purge" in replies[1].text
    assert "likes cats" not in replies[2].text and "Lisbon" in replies[2].text
    assert "only for the owner" in replies[3].text
    assert "private chat" in replies[4].text
    assert "cats" not in (workspace / "USER.md").read_text()
    assert any(c.message.startswith("forget:") for c in log)
    assert fake_llm.requests == []


async def test_dream_log_and_restore(fake_llm: FakeLLMServer, make_config: Callable, workspace: Path) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        await gw.parts.store.append_history("- The user now prefers green tea", session_key="cli:1")
        gw.parts.owner_sessions.add("cli:1")
        user_before = (workspace / "USER.md").read_text()
        fake_llm.queue(
            Reply("[USER] prefers green tea"),
            ToolCalls([("edit_file", {"path": "USER.md", "old_text": user_before.strip().splitlines()[-1],
                                      "new_text": user_before.strip().splitlines()[-1] + "\n- Prefers green tea"})]),
            Reply("done"),
        )
        await ch.say("/dream", **OWNER)
        [dream_reply] = await ch.wait_replies(1)
        assert "Prefers green tea" in (workspace / "USER.md").read_text()
        await ch.say("/dream_log", **OWNER)
        [_, log_reply] = await ch.wait_replies(2)
        sha = next(line.split()[0] for line in log_reply.text.splitlines() if "dream:" in line)
        await ch.say(f"/dream-log {sha}", **OWNER)
        await ch.say(f"/dream-restore {sha}", **OWNER)
        replies = await ch.wait_replies(4)
    assert "Prefers green tea" in replies[2].text  # the diff
    assert replies[3].text.startswith("Restored")
    assert "Prefers green tea" not in (workspace / "USER.md").read_text()
    assert "change" in dream_reply.text.lower()


async def test_status_reports_tokens_used_by_the_session(fake_llm: FakeLLMServer, make_config: Callable,
                                                         workspace: Path) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    fake_llm.queue(Reply("hi", prompt_tokens=1234, completion_tokens=56, cached_tokens=1000))
    async with gw:
        await ch.say("hello", **OWNER)
        await ch.wait_replies(1)
        await ch.say("/status", **OWNER)
        [_, status] = await ch.wait_replies(2)
    assert "1,234 prompt, 56 completion, 1,000 cached" in status.text
    day_files = list((workspace / "usage").glob("*.jsonl"))
    entry = json.loads(day_files[0].read_text().splitlines()[0])
    assert entry["job"] == "turn" and entry["session"] == "cli:1" and entry["prompt"] == 1234


async def test_forget_is_refused_while_dream_runs(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        (workspace / "USER.md").write_text("# User\n- likes cats\n")
        await gw.parts.store.append_history("- something new", session_key="cli:1")
        fake_llm.latency = 1.5
        fake_llm.queue(Reply("[SKIP]"))
        await ch.say("/dream", chat_id="1", **OWNER)
        await fake_llm.wait_for_requests(1)
        await ch.say("/forget cats", chat_id="2", **OWNER)
        await ch.wait_replies(2)
        refused = ch.replies(chat_id="2")[0].text
    assert "Dream is updating memory" in refused
    assert "likes cats" in (workspace / "USER.md").read_text()


async def test_dream_runs_are_counted_on_metrics(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        await ch.say("/dream", **OWNER)  # nothing in history: a run without a model call
        [reply] = await ch.wait_replies(1)
        metrics = gw.parts.metrics.render().decode()
    assert reply.text == "Dream: nothing new to process."
    assert 'lucid_dream_runs_total{status="nothing"} 1.0' in metrics
    assert fake_llm.requests == []
