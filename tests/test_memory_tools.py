"""``memory_forget`` and ``memory_list``: the owner asks the model to forget, or what it knows,
through the real loop and the fake LLM; guards as ``/forget`` has them."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_agent_loop import OWNER, running


def tool_results(fake_llm: FakeLLMServer, index: int) -> list[str]:
    return [m["content"] for m in fake_llm.requests[index]["messages"] if m.get("role") == "tool"]


async def test_the_model_lists_then_forgets_for_the_owner(fake_llm: FakeLLMServer, make_config: Callable,
                                                          workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake_llm.queue(ToolCalls([("memory_list", {"text": "Cats"})]),
                   ToolCalls([("memory_forget", {"text": "cats"}), ("memory_forget", {"text": "a"})]),
                   ToolCalls([("memory_forget", {"text": "cats", "confirm": True})]),
                   ToolCalls([("memory_list", {"text": "cats"})]), Reply("Forgotten."))
    caplog.set_level(logging.INFO, logger="lucidgate.memory.forget")
    async with running(make_config()) as (gw, ch):
        (workspace / "USER.md").write_text("# User\n- lives in Lisbon\n- likes cats\n")
        (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- the cats are Tom and Mia\n")
        (workspace / "memory" / "2026-01-05.md").write_text("- took the cats to the vet\n")
        await gw.parts.store.append_history("- adopted two cats\n- bought a bike", session_key="cli:1")
        await ch.say("what do you know about my cats? then forget it", **OWNER)
        [reply] = await ch.wait_replies(1)
        log = [c.message for c in gw.parts.git.log(5)]
    assert reply.text == "Forgotten."
    offered = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert {"memory_forget", "memory_list"} <= offered
    listed = tool_results(fake_llm, 1)[0].splitlines()
    assert listed[:2] == ["memory/MEMORY.md:2: - the cats are Tom and Mia", "USER.md:3: - likes cats"]
    assert listed[2] == "memory/2026-01-05.md:1: - took the cats to the vet"
    assert listed[3].startswith("history #1 ") and listed[3].endswith(": - adopted two cats")
    large, short = tool_results(fake_llm, 2)[-2:]
    assert large.startswith("Error: not forgotten: forgetting 'cats' would remove 4 of memory's")
    assert "more than a quarter" in large  # the drop guard asks before wiping
    assert short.startswith("Error: invalid arguments for memory_forget")
    forgot = tool_results(fake_llm, 3)[-1]
    assert forgot.startswith("Forgot:\n") and "memory/2026-01-05.md: 1 line(s)" in forgot
    assert "history: 1 line(s) in 1 entr" in forgot
    # notes too; and the conversation itself now shows the model "[forgotten]", not the word
    assert tool_results(fake_llm, 4)[-1] == "Nothing in memory mentions '[forgotten]'."
    sent = json.dumps(fake_llm.requests[4]["messages"]).lower()  # the system prompt's memory section too
    assert "cats" not in sent, sent[max(0, sent.find("cats") - 300):sent.find("cats") + 100]
    assert "cats" not in (workspace / "USER.md").read_text() + (workspace / "memory" / "MEMORY.md").read_text()
    assert "cats" not in (workspace / "memory" / "2026-01-05.md").read_text()
    history = (workspace / "memory" / "history.jsonl").read_text()
    assert "cats" not in history and "bought a bike" in history
    assert any(m.startswith("forget: [") and m.endswith("(asked by memory_forget in cli:1)")
               for m in log)  # undoable like /forget, and says who asked
    assert any("(asked by memory_forget in cli:1): 4 line(s) removed" in r.getMessage()
               for r in caplog.records)


async def test_guests_and_groups_cannot_use_them(fake_llm: FakeLLMServer, make_config: Callable,
                                                 workspace: Path) -> None:
    fake_llm.queue(Reply("hi guest"), ToolCalls([("memory_forget", {"text": "cats"})]), Reply("no"))
    async with running(make_config()) as (gw, ch):
        (workspace / "USER.md").write_text("# User\n- likes cats\n")
        await ch.say("forget cats", sender_id="stranger", chat_id="9")
        await ch.wait_replies(1)
        await ch.say("forget cats", chat_id="g", chat_type="group", **OWNER)
        await ch.wait_replies(2)
    guest_tools = {t["function"]["name"] for t in fake_llm.requests[0].get("tools", [])}
    assert not guest_tools & {"memory_forget", "memory_list"}
    assert tool_results(fake_llm, 2)[-1] == \
        "Error: memory can only be changed or listed in the owner's private chat"
    assert "likes cats" in (workspace / "USER.md").read_text()
    assert json.dumps(fake_llm.requests[0]).count("memory_forget") == 0
