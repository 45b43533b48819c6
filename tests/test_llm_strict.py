"""Tool-calling plumbing against a strict, llama-cpp-python-like server (issue 18, items 1-3).

Each test switches on one strictness of the fake server (``FakeLLMServer.strict``) or scripts
an answer real servers send (``Cut``, ``Empty``), and drives the real gateway: bus -> agent
loop -> tool loop -> litellm over HTTP -> the fake.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.test_agent_loop import running
from tests.fakes.llm import ContextOverflow, Cut, Empty, Fail, FakeLLMServer, Reply, ToolCalls

OWNER = dict(sender_id="local")
WAIT = 60.0


def transcript(workspace: Path, stem: str = "cli_1") -> list[dict[str, Any]]:
    path = workspace / "sessions" / f"{stem}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()][1:]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m.get("role") == "tool"]


# ------------------------------------------------------------------ item 1: request shape

async def test_tool_choice_auto_makes_a_strict_server_call_tools(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.strict.tools_need_tool_choice = True
    fake_llm.queue(ToolCalls([("write_file", {"path": "cat.md", "content": "Miso"})]), Reply("noted"))
    async with running(make_config()) as (_, ch):
        await ch.say("remember my cat is Miso", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.text == "noted"
    assert fake_llm.requests[0]["tool_choice"] == "auto"
    assert (workspace / "cat.md").read_text() == "Miso"  # the tool call really executed


async def test_without_tool_choice_the_strict_server_ignores_tools(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    """The strictness is real: switch ``toolChoice`` off and no tool ever runs."""
    fake_llm.strict.tools_need_tool_choice = True
    fake_llm.queue(ToolCalls([("write_file", {"path": "cat.md", "content": "Miso"})], text="ok"))
    config = make_config(providers={"openai": {"toolChoice": None}})
    async with running(config) as (_, ch):
        await ch.say("remember my cat is Miso", **OWNER)
        await ch.wait_replies(1, WAIT)
    assert "tool_choice" not in fake_llm.requests[0] and fake_llm.requests[0]["tools"]
    assert not (workspace / "cat.md").exists() and len(fake_llm.requests) == 1


async def test_tool_call_messages_always_carry_content(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.strict.content_required = True  # HTTP 500 on a tool-call message without content
    (workspace / "a.txt").write_text("alpha")
    fake_llm.queue(ToolCalls([("read_file", {"path": "a.txt"})]),
                   ToolCalls([("list_dir", {})]), Reply("done"))
    async with running(make_config()) as (_, ch):
        await ch.say("look around", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.kind == "text" and reply.text == "done" and len(fake_llm.requests) == 3
    sent = [m for m in fake_llm.requests[2]["messages"] if m.get("tool_calls")]
    assert len(sent) == 2 and all(m["content"] == "" for m in sent)
    stored = [m for m in transcript(workspace) if m.get("tool_calls")]
    assert len(stored) == 2 and all(m["content"] == "" for m in stored)  # stored as "", not null


async def test_old_transcripts_with_null_content_are_sent_with_empty_content(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.strict.content_required = True
    call = {"id": "c1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
    lines = [{"_type": "metadata", "v": 1, "key": "cli:1", "metadata": {}, "last_consolidated": 0},
             {"role": "user", "content": "earlier"},
             {"role": "assistant", "content": None, "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "c1", "name": "list_dir", "content": "x"},
             {"role": "assistant", "content": "earlier answer"}]
    (workspace / "sessions").mkdir(parents=True, exist_ok=True)
    (workspace / "sessions" / "cli_1.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    fake_llm.queue(Reply("fine"))
    async with running(make_config()) as (_, ch):
        await ch.say("and now", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.text == "fine"


async def test_tool_turns_are_not_streamed_to_a_local_server(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    fake_llm.strict.stream_fails_with_tools = True
    fake_llm.queue(Reply("plain answer"))
    async with running(make_config()) as (gw, ch):
        gw.parts.agent.runner.streaming_channels = frozenset({"cli"})
        await ch.say("hi", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.text == "plain answer" and len(fake_llm.requests) == 1
    assert not fake_llm.requests[0].get("stream")


async def test_a_failed_stream_falls_back_to_one_plain_call(
    fake_llm: FakeLLMServer, make_config: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.strict.stream_fails_with_tools = True
    fake_llm.queue(Reply("first try"), Reply("second try"))
    config = make_config(providers={"openai": {"streamToolCalls": True}})  # claimed, but it breaks
    with caplog.at_level(logging.WARNING, logger="lucidgate.gateway.model.client"):
        async with running(config) as (gw, ch):
            gw.parts.agent.runner.streaming_channels = frozenset({"cli"})
            await ch.say("hi", **OWNER)
            [reply] = await ch.wait_replies(1, WAIT)
    assert reply.kind == "text" and reply.text == "second try"
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, False]
    assert "without streaming" in caplog.text and "stream broke" in caplog.text


# ------------------------------------------------------------------ item 2: answers checked

async def test_a_cut_answer_says_it_was_cut(fake_llm: FakeLLMServer, make_config: Callable,
                                            workspace: Path) -> None:
    fake_llm.queue(Cut("The three steps are: first, open the"))
    async with running(make_config()) as (_, ch):
        await ch.say("explain", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.text.startswith("The three steps are: first, open the")
    assert "cut off" in reply.text and "maxCompletionTokens" in reply.text
    assert "cut off" in transcript(workspace)[-1]["content"]


async def test_tool_calls_with_cut_json_are_not_executed(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.queue(Cut(calls=[("write_file", '{"path": "cut.md", "content": "half of the te')]))
    async with running(make_config()) as (_, ch):
        await ch.say("write it", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert not (workspace / "cut.md").exists() and len(fake_llm.requests) == 1
    assert "cut off" in reply.text


async def test_an_intact_call_in_a_cut_answer_still_runs(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.queue(Cut(calls=[("write_file", {"path": "ok.md", "content": "whole"}),
                              ("write_file", '{"path": "cut.md", "cont')]),
                   Reply("wrote one"))
    async with running(make_config()) as (_, ch):
        await ch.say("write both", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert (workspace / "ok.md").read_text() == "whole" and not (workspace / "cut.md").exists()
    assert reply.text == "wrote one"


async def test_an_empty_answer_is_asked_again_once(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    fake_llm.queue(Empty("tool_calls"), Reply("there you go"))
    async with running(make_config()) as (_, ch):
        await ch.say("hi", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.text == "there you go" and len(fake_llm.requests) == 2


async def test_two_empty_answers_end_in_a_clear_error(fake_llm: FakeLLMServer, make_config: Callable,
                                                      workspace: Path) -> None:
    fake_llm.queue(Empty(), Empty("tool_calls"), Reply("never requested"))
    async with running(make_config()) as (_, ch):
        await ch.say("hi", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.kind == "error" and "empty answer" in reply.text
    assert len(fake_llm.requests) == 2 and fake_llm.pending == 1
    assert "(no answer)" not in reply.text


async def test_the_providers_own_message_is_logged_and_shown_to_the_owner_only(
    fake_llm: FakeLLMServer, make_config: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    said = "Failed to parse input at pos 12: grammar error"
    fake_llm.queue(Fail(500, said), Fail(500, said))
    config = make_config(channels={"webhook": {"owners": ["boss"]}}, agents={"defaults": {"llmRetries": 0}})
    with caplog.at_level(logging.WARNING, logger="lucidgate.gateway.model.client"):
        async with running(config, name="webhook") as (_, ch):
            await ch.say("hi", sender_id="boss", chat_id="1")
            await ch.wait_replies(1, WAIT)
            await ch.say("hi", sender_id="stranger", chat_id="2")
            await ch.wait_replies(2, WAIT)
    owner, guest = ch.replies("1")[0], ch.replies("2")[0]
    assert owner.kind == guest.kind == "error"
    assert said in owner.text and "the provider said" in owner.text
    assert said not in guest.text and "kept failing" in guest.text
    assert said in caplog.text


# ------------------------------------------------------------------ item 3: loops and overflow

async def test_a_repeated_tool_call_ends_the_turn(fake_llm: FakeLLMServer, make_config: Callable,
                                                  workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha")
    same = ("read_file", {"path": "a.txt"})
    fake_llm.queue(ToolCalls([same]), ToolCalls([same]), ToolCalls([("read_file", '{"path":"a.txt"}')]),
                   Reply("never requested"))
    async with running(make_config()) as (_, ch):
        await ch.say("read a.txt", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert len(fake_llm.requests) == 3 and fake_llm.pending == 1
    assert "kept calling read_file with the same arguments" in reply.text
    results = [m["content"] for m in transcript(workspace) if m.get("role") == "tool"]
    assert results[:2] == ["     1\talpha", "     1\talpha"]
    assert results[2].startswith("Error: not run") and "same arguments 3 times" in results[2]


async def test_overflow_inside_one_turn_advises_what_helps(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("line of text\n" * 400)
    fake_llm.queue(ToolCalls([("read_file", {"path": "big.txt"})]), ContextOverflow(), ContextOverflow(),
                   Reply("never requested"))
    async with running(make_config()) as (_, ch):
        await ch.say("read big.txt", **OWNER)
        [reply] = await ch.wait_replies(1, WAIT)
    assert reply.kind == "error"
    assert "fewer or narrower tool calls" in reply.text and "/stop" in reply.text
    assert "/new" not in reply.text
    # The long result made the truncation step worth it: the retry really was smaller.
    first, second = fake_llm.requests[1], fake_llm.requests[2]
    assert len(tool_results(second)[0]) < len(tool_results(first)[0])
    assert fake_llm.pending == 1
