"""The memory flush before compaction, end to end through the fake LLM (issue 17, item 4).

A small working set makes one long owner message cross the flush threshold. The fake LLM
answers by what it is asked: the turn gets "ok", the flush writes today's note and says
NO_REPLY, the consolidator's summary request gets a bullet. Order is read from the requests
the server received, never from timing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from lucidgate.gateway.agent.memory_flush import FLUSH_KIND, NO_REPLY
from lucidgate.memory.consolidation_prompt import SYSTEM_PROMPT as SUMMARY_PROMPT
from lucidgate.channels.messages import InboundMessage
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls, message_text
from tests.test_agent_loop import running

LONG = "Here is what happened at the planning meeting today. " + " ".join(
    f"Point {i}: the venue for the spring party is the boathouse on pier {i}." for i in range(40))


def is_flush(request: dict[str, Any]) -> bool:
    """A request of the flush turn: its latest user message is the flush instruction."""
    last_user = next(m for m in reversed(request["messages"]) if m["role"] == "user")
    return "[memory flush" in message_text(last_user)


def is_summary(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"].startswith(SUMMARY_PROMPT[:60])


def scripted(note: str) -> Callable[[dict[str, Any]], Any]:
    def answer(request: dict[str, Any]) -> Any:
        if is_summary(request):
            return Reply("- The spring party venue is the boathouse.")
        if is_flush(request):
            if request["messages"][-1]["role"] == "tool":
                return Reply(NO_REPLY)
            return ToolCalls([("write_file", {"path": note, "content": "- Spring party: the boathouse.\n"})])
        return Reply("ok")
    return answer


def small_working_set(make_config: Callable[..., Any]) -> Any:
    return make_config(agents={"defaults": {"workingSetTokens": 256, "timezone": "UTC"}})


async def test_owner_flush_writes_the_note_silently_before_the_compaction(
        fake_llm: FakeLLMServer, make_config: Callable[..., Any], workspace: Path) -> None:
    note = f"memory/{date.today().isoformat()}.md"
    fake_llm.default = scripted(note)
    async with running(small_working_set(make_config)) as (gw, ch):
        await ch.say(LONG, sender_id="local")
        await ch.wait_replies(1)
        await gw.parts.agent.idle()
        await gw.parts.consolidator.drain()
        await ch.say("/status", sender_id="local")
        replies = await ch.wait_replies(2)
        session = await gw.parts.sessions.get("cli:1")
        flush = gw.parts.agent.flush
        assert flush is not None
        ctx = gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id="1", sender_id="local",
                                                        text="x", chat_type="private", role="owner"))
        same_cycle = dataclasses.replace(session, last_consolidated=flush._cycle["cli:1"])
        assert not flush.due(same_cycle, ctx)  # once per cycle
    kinds = ["flush" if is_flush(r) else "summary" if is_summary(r) else "turn" for r in fake_llm.requests]
    assert kinds.index("flush") < kinds.index("summary"), kinds
    assert kinds.count("flush") == 2  # the write_file call, then NO_REPLY after its result
    flush_request = next(r for r in fake_llm.requests if is_flush(r))
    assert "stream" not in flush_request or not flush_request["stream"]
    assert (workspace / note).read_text() == "- Spring party: the boathouse.\n"
    texts = [r.text for r in replies]
    assert texts[0] == "ok" and all(NO_REPLY not in t for t in texts)
    assert "memory flushes before compaction (since start): 1" in texts[1]
    assert any(m.get("kind") == FLUSH_KIND for m in session.messages)


async def test_guests_never_flush(fake_llm: FakeLLMServer, make_config: Callable[..., Any]) -> None:
    fake_llm.default = scripted("memory/x.md")
    async with running(small_working_set(make_config)) as (gw, ch):
        await ch.say(LONG, sender_id="stranger", chat_id="9")
        await ch.wait_replies(1)
        await gw.parts.agent.idle()
        await gw.parts.consolidator.drain()
        assert gw.parts.agent.flush is not None and gw.parts.agent.flush.count == 0
    assert not any(is_flush(r) for r in fake_llm.requests)


async def test_todays_and_yesterdays_notes_are_in_the_owner_prompt_only(
        fake_llm: FakeLLMServer, make_config: Callable[..., Any], workspace: Path) -> None:
    today = date.today()
    notes = workspace / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    (notes / f"{today.isoformat()}.md").write_text("- today: dentist at 3pm\n")
    (notes / f"{(today - timedelta(days=1)).isoformat()}.md").write_text("- yesterday: bought a kite\n")
    (notes / f"{(today - timedelta(days=2)).isoformat()}.md").write_text("- older: not in the prompt\n")
    fake_llm.queue(Reply("ok"), Reply("ok"))
    async with running(make_config(agents={"defaults": {"timezone": "UTC"}})) as (gw, ch):
        await ch.say("hi", sender_id="local")
        await ch.wait_replies(1)
        await ch.say("hi", sender_id="stranger", chat_id="9")
        await ch.wait_replies(2)
    owner = next(r for r in fake_llm.requests if "chat_id: 1" in message_text(r["messages"][-1]))
    guest = next(r for r in fake_llm.requests if "chat_id: 9" in message_text(r["messages"][-1]))
    system = owner["messages"][0]["content"]
    assert "dentist at 3pm" in system and "bought a kite" in system and "not in the prompt" not in system
    assert system.index("bought a kite") < system.index("dentist at 3pm")  # yesterday, then today
    assert "dentist" not in guest["messages"][0]["content"]


# ----------------------------------------------------------------------------- settings


def test_flush_settings_have_documented_defaults() -> None:
    from lucidgate.config.schema import AgentDefaults, MemoryConfig
    from lucidgate.gateway.agent.memory_flush import flush_threshold

    memory = MemoryConfig()
    assert (memory.flush_soft_threshold_tokens, memory.flush_transcript_bytes, memory.flush_instruction,
            memory.flush_framing) == (None, None, None, None)
    assert flush_threshold(AgentDefaults().working_set, None) == 17_500  # 2,500 below 20,000
    assert flush_threshold(20_000, 4000) == 16_000
    assert flush_threshold(20_000, 19_000) == 5000  # never below a quarter of the working set


async def test_soft_threshold_and_custom_instruction(fake_llm: FakeLLMServer,
                                                     make_config: Callable[..., Any]) -> None:
    note = f"memory/{date.today().isoformat()}.md"
    fake_llm.default = scripted(note)
    medium = "Remember the boathouse on pier 7 for the party. " * 30  # ~400 tokens
    plain = make_config(agents={"defaults": {"workingSetTokens": 1000, "timezone": "UTC"}})
    async with running(plain) as (gw, ch):
        await ch.say(medium, sender_id="local")
        await ch.wait_replies(1)
        await gw.parts.agent.idle()
    assert not any(is_flush(r) for r in fake_llm.requests)  # 875 tokens by default: not yet
    fake_llm.requests.clear()
    tuned = make_config(agents={"defaults": {"workingSetTokens": 1000, "timezone": "UTC", "memory": {
        "flushSoftThresholdTokens": 700, "flushInstruction": "Keep only open todos, one per line.",
        "flushFraming": "[memory flush: housekeeping only, nobody reads this answer]"}}})
    async with running(tuned) as (gw, ch):
        await ch.say(medium, sender_id="local", chat_id="2")
        await ch.wait_replies(1)
        await gw.parts.agent.idle()
    flush = next(r for r in fake_llm.requests if is_flush(r))
    instruction = message_text(next(m for m in reversed(flush["messages"]) if m["role"] == "user"))
    assert "Keep only open todos, one per line." in instruction
    assert note in instruction and instruction.endswith(f"answer exactly {NO_REPLY}.")
    assert "summarised into history" not in instruction  # the owner's words replace the default
    assert "\n[memory flush: housekeeping only, nobody reads this answer] Keep only" in instruction
    assert "the user does not see this turn" not in instruction  # and the framing too


async def test_transcript_size_trigger(fake_llm: FakeLLMServer, make_config: Callable[..., Any]) -> None:
    fake_llm.default = scripted(f"memory/{date.today().isoformat()}.md")
    config = make_config(agents={"defaults": {"timezone": "UTC", "memory": {"flushTranscriptBytes": 2048}}})
    async with running(config) as (gw, ch):
        await ch.say(LONG, sender_id="local")  # ~3 KB: far below the 20k-token working set
        await ch.wait_replies(1)
        await gw.parts.agent.idle()
        flush = gw.parts.agent.flush
        assert flush is not None and flush.count == 1
        await ch.say("and one short line", sender_id="local")
        await ch.wait_replies(2)
        await gw.parts.agent.idle()
        assert flush.count == 1  # counted from the last flush: no repeat
