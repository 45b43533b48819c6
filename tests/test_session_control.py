"""Session control: /compact, /context, `lucid sessions`, `lucid agent -s NAME`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.gateway.app import build_gateway
from lucidgate.memory import tokens
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Func, Reply
from tests.test_cli import lucid, write_config

OWNER = dict(sender_id="local")


def history(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / "memory" / "history.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def test_compact_moves_older_turns_to_history_and_the_chat_goes_on(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        for n, word in enumerate(("alpha", "bravo", "charlie"), 1):
            fake_llm.queue(Reply(f"noted {word}"))
            await ch.say(f"remember {word}", **OWNER)
            await ch.wait_replies(n)
        fake_llm.queue(Reply("- The user listed alpha and bravo"))
        await ch.say("/compact", **OWNER)
        [*_, compacted] = await ch.wait_replies(4)
        fake_llm.queue(Reply("still here"))
        await ch.say("and delta", **OWNER)
        [*_, after] = await ch.wait_replies(5)
        fake_llm.queue(Reply("- The user said charlie"))
        await ch.say("/compact", **OWNER)
        [*_, again] = await ch.wait_replies(6)
    assert compacted.text.startswith("Compacted: 4 message(s)") and "2 remain" in compacted.text
    assert [e["content"] for e in history(workspace)] == ["- The user listed alpha and bravo",
                                                          "- The user said charlie"]
    summary_request = fake_llm.requests[3]
    assert "remember alpha" in json.dumps(summary_request) and "remember charlie" not in json.dumps(summary_request)
    turn = fake_llm.requests[4]["messages"]
    said = [m["content"] for m in turn if m["role"] in ("user", "assistant")]
    assert not any("alpha" in s or "bravo" in s for s in said[:-1] if isinstance(s, str))
    assert "noted charlie" in said and said[-1].endswith("and delta")
    assert after.text == "still here"
    # The latest exchange always stays in context.
    assert again.text.startswith("Compacted: 2 message(s)") and "2 remain" in again.text


async def test_context_shows_tokens_per_section_as_the_next_prompt_would_hold(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    fake_llm.queue(Reply("hi"))
    async with gw:
        (workspace / "USER.md").write_text("# User\n- likes long walks\n")
        await ch.say("hello", **OWNER)
        await ch.wait_replies(1)
        await ch.say("/context", **OWNER)
        [_, report] = await ch.wait_replies(2)
        await ch.say("/context", sender_id="stranger", chat_id="9")
        [*_, guest] = await ch.wait_replies(3)
    lines = {line.rsplit("  ", 1)[0].strip(): line for line in report.text.splitlines()[1:]}
    assert len(lines) == len(report.text.splitlines()[1:]), report.text  # no two rows share a name
    assert any(key.startswith("active skills") for key in lines), report.text  # the always-on memory skill
    for label in ("identity", "AGENTS.md", "SOUL.md", "skills", "memory (USER.md, MEMORY.md)",
                  "recent history", "tools (", "messages (2 in context, 0 archived)", "total"):
        assert any(key.startswith(label) for key in lines), (label, report.text)
    request = fake_llm.requests[0]
    tool_tokens = tokens.count_tools(request["tools"])
    assert f"{tool_tokens:,}" in next(v for k, v in lines.items() if k.startswith("tools ("))
    memory_row = next(v for k, v in lines.items() if k.startswith("memory"))
    assert int(memory_row.split()[-1].replace(",", "")) > 0
    guest_memory = next(line for line in guest.text.splitlines() if line.startswith("memory"))
    assert guest_memory.split()[-1] == "0"  # a guest's prompt never holds the owner's memory
    assert len(fake_llm.requests) == 1  # /context makes no LLM call


async def test_lucid_sessions_and_agent_session_names(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    config = write_config(tmp_path / "config.json", workspace, fake_llm.base_url)
    fake_llm.queue(Reply("one"), Reply("two"), Func(lambda req: Reply(str(len(req["messages"])))))
    assert (await lucid("agent", "-c", str(config), "-s", "work", "-m", "hi work", home=tmp_path))[0] == 0
    assert (await lucid("agent", "-c", str(config), "-m", "hi default", home=tmp_path))[0] == 0
    code, out, _ = await lucid("agent", "-c", str(config), "-s", "work", "-m", "again", home=tmp_path)
    assert code == 0
    # The third request carried the "work" session's earlier exchange: system, 2 old, 1 new.
    assert out.strip() == "4"
    assert (workspace / "sessions" / "cli_work.jsonl").exists()
    assert (workspace / "sessions" / "cli_local.jsonl").exists()
    code, out, _ = await lucid("sessions", "-c", str(config), home=tmp_path, env={"COLUMNS": "200"})
    assert code == 0 and "cli:work" in out and "cli:local" in out and "lucid agent -s work" in out
    assert out.index("cli:work") < out.index("cli:local")  # newest first
    code, _, err = await lucid("agent", "-c", str(config), "-s", "../etc", "-m", "x", home=tmp_path)
    assert code == 2 and "invalid session name" in err


async def test_the_working_set_keeps_the_conversation_bounded_whatever_the_window(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    def answer(request: dict[str, Any]) -> Reply:
        if not request.get("tools"):  # a consolidation summary
            return Reply("- the user said some numbered things")
        return Reply("ok " + "x" * 200)

    config = make_config(agents={"defaults": {"workingSetTokens": 600, "contextWindowTokens": 65536}})
    gw = build_gateway(config)
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    fake_llm.default = answer
    async with gw:
        for n in range(1, 25):
            await ch.say(f"number {n} " + "y" * 200, **OWNER)
            await ch.wait_replies(n)
            # The reply goes out inside the turn; the background check is scheduled after it.
            await gw.parts.agent.idle()
            await gw.parts.consolidator.drain()
        session = await gw.parts.sessions.get("cli:1")
        conversation = gw.parts.consolidator.conversation_tokens(session)
        await ch.say("/status", **OWNER)
        [*_, status] = await ch.wait_replies(25)
    assert session.last_consolidated > 0 and conversation <= 600
    assert history(workspace), "older turns went to history"
    turn_requests = [r for r in fake_llm.requests if r.get("tools")]
    sizes = [sum(len(str(m.get("content") or "")) for m in r["messages"][1:]) for r in turn_requests]
    assert max(sizes[-8:]) < 2 * 600 * 4  # the last turns' conversations stay bounded (chars)
    assert f"working set {conversation:,} of 600 tokens" in status.text
