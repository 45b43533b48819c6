"""Recall through the whole gateway and the fake LLM: the agent calls memory_search and
answers from what it found (a fact 2,000 history entries back, long archived; a Chinese
paraphrase of a Chinese note), auto-recall fills the runtime block (never the system
prompt), guests only ever reach their own chat, memory_get reads exact lines."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.memory_search import MemoryGet
from lucidgate.memory.search.index import MemoryIndex
from lucidgate.memory.store import MemoryStore
from tests.fakes.channel import FakeChannel
from tests.fakes.context import make_ctx
from tests.fakes.llm import FakeLLMServer, Func, Reply, ToolCalls, message_text
from tests.search_kit import MEMORY_MD, e5, transcript, write_corpus

KEYWORD_ONLY = {"memory": {"search": {"embedding": {"model": "none"}}}}
FACT = "- The user's favourite bakery is Padaria Moderna on Rua Augusta."


def tool_results(request: dict[str, Any]) -> list[str]:
    return [message_text(m) for m in request["messages"] if m["role"] == "tool"]


def answer_from_tool(request: dict[str, Any]) -> Reply:
    return Reply("From memory: " + tool_results(request)[-1])


def write_long_history(workspace: Path, count: int) -> None:
    memory = workspace / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    lines = [{"cursor": 1, "timestamp": "2026-01-03 10:00", "content": FACT, "session_key": "cli:1"}]
    lines += [{"cursor": i + 2, "timestamp": "2026-02-01 10:00",
               "content": f"- small talk number {i} about the weather", "session_key": "cli:1"}
              for i in range(count)]
    (memory / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (memory / ".cursor").write_text(f"{count + 1}\n")


async def test_owner_finds_a_fact_from_2000_entries_ago(fake_llm: FakeLLMServer, make_config: Callable,
                                                      workspace: Path) -> None:
    write_long_history(workspace, 2000)
    store = MemoryStore(workspace, max_history_entries=100)
    await store.set_dream_cursor(1900)
    assert await store.compact_history() == 1900
    assert FACT not in (workspace / "memory" / "history.jsonl").read_text()  # long archived
    gw = build_gateway(make_config(agents={"defaults": {**KEYWORD_ONLY}}))
    assert gw.parts.recall is not None
    # This test asserts that auto-recall found the fact; its 1.5 s give-up (tested apart) can
    # pass on a busy 2-core box before the archive is indexed.
    gw.parts.recall.recall_timeout_s = 60
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    fake_llm.queue(ToolCalls([("memory_search", {"query": "favourite bakery"})]), Func(answer_from_tool))
    async with gw:
        await ch.say("What's the name of my favourite bakery?", sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
    assert "Padaria Moderna" in reply.text and "memory/archive/history-2026-01.jsonl" in reply.text
    first = fake_llm.requests[0]
    system, user = message_text(first["messages"][0]), message_text(first["messages"][-1])
    assert "memory_search" in system and "Padaria" not in system  # guidance yes, recall no
    assert "recalled from memory" in user and "Padaria Moderna" in user  # auto-recall
    assert {t["function"]["name"] for t in first["tools"]} >= {"memory_search", "memory_get"}
    # the system prompt stays byte-identical between the turn's requests
    assert message_text(fake_llm.requests[1]["messages"][0]) == system
    today = datetime.now(UTC).strftime("%Y-%m-%d")  # the configured timezone is UTC
    assert f"daily_note: memory/{today}.md" in user and "daily_note" not in system


async def test_status_and_memory_show_the_index_and_notes(fake_llm: FakeLLMServer, make_config: Callable,
                                                         workspace: Path) -> None:
    write_corpus(workspace)
    gw = build_gateway(make_config(agents={"defaults": {**KEYWORD_ONLY}}))
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        await ch.say("/status", sender_id="local")
        await ch.say("/memory", sender_id="local")
        status, memory = await ch.wait_replies(2, timeout=60)
    assert "recall index:" in status.text and "keyword-only" in status.text
    assert "Daily notes" in memory.text and "2026-05-02.md" in memory.text
    assert memory.text.index("2026-05-02.md") < memory.text.index("2026-03-14.md")  # newest first


@pytest.mark.slow
async def test_chinese_paraphrase_finds_the_chinese_note(fake_llm: FakeLLMServer, make_config: Callable,
                                                         workspace: Path) -> None:
    write_corpus(workspace)
    # Index and embed the corpus here, with the process's shared model at full priority: the
    # gateway's own background sync (a niced thread, so minutes on a busy 2-core box) then
    # only confirms it. Building that index in the background has tests of its own.
    index = MemoryIndex(workspace, embedder=e5())
    await asyncio.to_thread(index.sync)
    await asyncio.to_thread(index.close)
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    question = "我和朋友去过的饭店叫什么名字"  # shares no word with the note
    fake_llm.queue(ToolCalls([("memory_search", {"query": question})]), Func(answer_from_tool))
    assert gw.parts.recall is not None
    gw.parts.recall.start_delay_s = 0  # build the index now rather than after the first turns
    # Embed the corpus's open transcript windows at once instead of after 60 quiet seconds
    # (the settle rule has tests of its own; here it would only add a minute of waiting).
    gw.parts.recall.settle_s = 0
    async with gw:
        recall = gw.parts.recall
        assert recall is not None
        deadline = time.monotonic() + 300
        while True:  # the background sync embeds the corpus; wait for it, however slow the box
            status = await recall.status()
            if status["vectors_on"] and status["chunks"] and status["embedded"] >= status["chunks"]:
                break
            assert time.monotonic() < deadline, status
            recall.synced.clear()
            try:
                await asyncio.wait_for(recall.synced.wait(), 5)
            except TimeoutError:
                pass
        await ch.say(question, sender_id="local")
        [reply] = await ch.wait_replies(1, timeout=60)
    found = reply.text.split("\n\n")[:4]  # the top 3 results
    assert any("川味小馆" in part for part in found), reply.text


async def test_guest_search_and_recall_stay_in_their_own_chat(fake_llm: FakeLLMServer, make_config: Callable,
                                                              workspace: Path) -> None:
    write_corpus(workspace)
    (workspace / "sessions" / "webhook_g1.jsonl").write_text(transcript("webhook:g1", [
        ("user", "The book club meets on Thursdays; next book is about penicillin history."),
        ("assistant", "Thursdays it is.")], chat_type="group"))
    config = make_config(agents={"defaults": {**KEYWORD_ONLY}},
                         channels={"webhook": {"owners": ["boss"]}},
                         tools={"guestTools": ["memory_search", "memory_get"]})
    gw = build_gateway(config)
    ch = FakeChannel(gw.parts.bus, name="webhook", owners=gw.parts.config.channels.owners_of("webhook"))
    gw.add_channel("webhook", ch)
    probe = "penicillin Volvo 小米 Clara Ada Lisbon book club dentist"
    fake_llm.queue(ToolCalls([("memory_search", {"query": probe, "max_results": 20}),
                              ("memory_get", {"path": "memory/MEMORY.md"})]),
                   Func(answer_from_tool))
    async with gw:
        await ch.say(probe, sender_id="stranger", chat_id="g1", chat_type="group")
        [reply] = await ch.wait_replies(1, timeout=60)
    first, second = fake_llm.requests[0], fake_llm.requests[1]
    names = {t["function"]["name"] for t in first["tools"]}
    assert "memory_search" in names and "memory_get" not in names  # memory_get is owner-only
    search_result, get_result = tool_results(second)
    assert "book club" in search_result
    seen = search_result + message_text(first["messages"][-1]) + message_text(first["messages"][0])
    for owner_only in ("Allergic to penicillin", "blue Volvo XC40", "我的猫叫小米", "Clara's birthday",
                       "Name: Ada", "Alfama", "看牙医", "grandma"):
        assert owner_only not in seen, owner_only
    assert get_result.startswith("Error")


async def test_memory_get_reads_exact_lines(workspace: Path) -> None:
    write_corpus(workspace)
    tool = MemoryGet(workspace)
    params = MemoryGet.Params(path="memory/MEMORY.md", start_line=11, lines=2)
    out = await tool.run(make_ctx(workspace), params)
    expected = MEMORY_MD.splitlines()[10:12]
    assert out.splitlines()[1:] == [f"{11 + i}: {line}" for i, line in enumerate(expected)]
    for bad in ("../config.json", "sessions/../memory/MEMORY.md", "AGENTS.md", "/etc/passwd"):
        with pytest.raises(ToolError):
            await tool.run(make_ctx(workspace), MemoryGet.Params(path=bad))
    group = make_ctx(workspace)
    from dataclasses import replace
    with pytest.raises(ToolError, match="private chat"):
        await tool.run(replace(group, chat_type="group"), params)

