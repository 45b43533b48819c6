"""The agent loop end to end: bus -> loop -> litellm (real HTTP to the fake) -> tools -> reply."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from lucidgate.channels.messages import InboundMessage
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.memory.sessions import load_session_file
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import AfterRequests, ContextOverflow, Fail, FakeLLMServer, Func, Hang, Reply, ToolCalls

OWNER = dict(sender_id="local")


@asynccontextmanager
async def running(config: Any, name: str = "cli") -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name=name, owners=gw.parts.config.channels.owners_of(name))
    gw.add_channel(name, channel)
    async with gw:
        yield gw, channel


def session_lines(workspace: Path, stem: str) -> list[dict[str, Any]]:
    path = workspace / "sessions" / f"{stem}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_hello_round_trip(fake_llm: FakeLLMServer, make_config: Callable, workspace: Path) -> None:
    fake_llm.queue(Reply("Hi there!"))
    async with running(make_config()) as (gw, ch):
        await ch.say("hello", **OWNER)
        [reply] = await ch.wait_replies(1)
    assert reply.kind == "text" and reply.text == "Hi there!"
    request = fake_llm.requests[0]
    system = request["messages"][0]
    assert system["role"] == "system" and "## SOUL.md" in system["content"]
    assert "# Skills" in system["content"] and "skill-creator" in system["content"]
    user = request["messages"][-1]
    assert user["role"] == "user" and user["content"].startswith("[Runtime Context")
    assert user["content"].endswith("hello")
    assert {t["function"]["name"] for t in request["tools"]} >= {"read_file", "exec", "edit_file"}
    lines = session_lines(workspace, "cli_1")
    assert [line.get("role") for line in lines[1:]] == ["user", "assistant"]
    assert lines[1]["content"] == "hello"  # stored without the runtime block


async def test_user_message_is_on_disk_before_the_llm_call(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    seen_on_disk: list[bool] = []

    def check(_request: dict) -> Reply:
        text = (workspace / "sessions" / "cli_1.jsonl").read_text()
        seen_on_disk.append("persist me" in text)
        return Reply("ok")

    fake_llm.queue(Func(check))
    async with running(make_config()) as (gw, ch):
        await ch.say("persist me", **OWNER)
        await ch.wait_replies(1)
    assert seen_on_disk == [True]


async def test_sessions_run_concurrently_and_each_in_order(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    # A barrier: neither first answer comes until both sessions' requests are in flight at once.
    fake_llm.queue(AfterRequests(2, Reply("first of two")), AfterRequests(2, Reply("first of two")))
    async with running(make_config()) as (gw, ch):
        await ch.say("a1", chat_id="A", **OWNER)
        await ch.say("b1", chat_id="B", **OWNER)
        firsts = await ch.wait_replies(2)
        await ch.say("a2", chat_id="A", **OWNER)
        await ch.say("a3", chat_id="A", **OWNER)
        await ch.wait_replies(4)
    assert [r.text for r in firsts] == ["first of two", "first of two"], "the sessions did not run concurrently"
    a_requests = [r for r in fake_llm.requests if "chat_id: A" in r["messages"][-1]["content"]]
    # a3's request must already contain a2's answer: strictly ordered within the session.
    last = a_requests[-1]["messages"]
    assert [m["role"] for m in last[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert last[-1]["content"].endswith("a3") and last[-2]["content"].endswith("a2")


async def test_tool_loop_appends_as_it_goes(fake_llm: FakeLLMServer, make_config: Callable,
                                            workspace: Path) -> None:
    (workspace / "notes.txt").write_text("the answer is 42\n")
    fake_llm.queue(ToolCalls([("read_file", {"path": "notes.txt"})]), Reply("It says 42."))
    async with running(make_config()) as (gw, ch):
        await ch.say("what is in notes.txt?", **OWNER)
        [reply] = await ch.wait_replies(1)
    assert reply.text == "It says 42."
    second = fake_llm.requests[1]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert second[-1]["role"] == "tool" and "the answer is 42" in second[-1]["content"]
    roles = [line.get("role") for line in session_lines(workspace, "cli_1")[1:]]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_bad_tool_calls_become_errors_for_the_model(fake_llm: FakeLLMServer,
                                                          make_config: Callable) -> None:
    fake_llm.queue(
        ToolCalls([("read_file", '{"path": "x"'), ("no_such_tool", {}), ("read_file", {"path": "nope.txt"})]),
        Reply("sorry"),
    )
    async with running(make_config()) as (gw, ch):
        await ch.say("go", **OWNER)
        [reply] = await ch.wait_replies(1)
    assert reply.text == "sorry"
    results = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("Error: invalid arguments for read_file") and "JSON" in results[0]
    assert results[1].startswith("Error: there is no tool named 'no_such_tool'")
    assert results[2].startswith("Error:")


async def test_llm_failing_three_times_gives_a_clear_error_and_next_message_works(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    config = make_config(agents={"defaults": {"llmRetries": 2}})
    fake_llm.queue(Fail(500), Fail(500), Fail(500), Reply("back again"))
    async with running(config) as (gw, ch):
        await ch.say("first", **OWNER)
        [error] = await ch.wait_replies(1)
        await ch.say("second", **OWNER)
        replies = await ch.wait_replies(2)
    assert error.kind == "error" and "try again" in error.text
    assert len(fake_llm.requests) == 4  # 3 attempts (ours, not litellm's) + the next message
    assert replies[1].text == "back again"
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert session.pending_state() is None
    # the failed turn is not sent to the model again as a dangling error marker
    assert all("no reply" not in (m.get("content") or "") for m in fake_llm.requests[3]["messages"])


async def test_llm_that_hangs_times_out(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    config = make_config(agents={"defaults": {"llmTimeoutS": 0.5, "llmRetries": 0}})
    fake_llm.queue(Hang(60))
    async with running(config) as (gw, ch):
        started = time.monotonic()
        await ch.say("hello?", **OWNER)
        [error] = await ch.wait_replies(1)
    assert error.kind == "error" and "in time" in error.text
    assert time.monotonic() - started < 30  # the 0.5 s timeout, not the 60 s hang


async def test_empty_and_oversized_messages_are_refused_without_llm(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    config = make_config(agents={"defaults": {"maxMessageChars": 1000}})
    async with running(config) as (gw, ch):
        await ch.say("   ", **OWNER)
        await ch.say("x" * 1_000_001, **OWNER)
        replies = await ch.wait_replies(2)
    assert "empty" in replies[0].text
    assert "1,000,001" in replies[1].text and "1,000" in replies[1].text
    assert fake_llm.requests == []


async def test_context_overflow_truncates_then_consolidates(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.queue(Reply("first answer"))
    async with running(make_config()) as (gw, ch):
        await ch.say("remember: my cat is called Tom", **OWNER)
        await ch.wait_replies(1)
        # No tool result is long, so truncating would re-send the same request: the
        # overflow goes straight to a consolidation round.
        fake_llm.queue(ContextOverflow(), Reply("- cat Tom"), Reply("fits now"))
        await ch.say("and now?", **OWNER)
        replies = await ch.wait_replies(2)
    assert replies[1].text == "fits now"
    assert len(fake_llm.requests) == 4 and fake_llm.pending == 0
    history = (workspace / "memory" / "history.jsonl").read_text()
    assert "cat Tom" in history


async def test_slash_commands_run_without_the_llm(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    async with running(make_config()) as (gw, ch):
        await ch.say("/help", **OWNER)
        await ch.say("/status", **OWNER)
        await ch.say("/dream_log", **OWNER)
        await ch.say("/frobnicate", **OWNER)
        replies = await ch.wait_replies(4)
    assert "/new" in replies[0].text and "/dream-log" in replies[0].text
    assert "model: openai/fake-model" in replies[1].text
    assert "Unknown command" not in replies[2].text
    assert "Unknown command /frobnicate" in replies[3].text
    assert fake_llm.requests == []


async def test_guest_gets_no_shell_no_files_and_no_memory(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    (workspace / "USER.md").parent.mkdir(parents=True, exist_ok=True)
    config = make_config(channels={"webhook": {"owners": ["boss"]}})
    async with running(config, name="webhook") as (gw, ch):
        (workspace / "USER.md").write_text("# User\n- secret owner fact\n")
        await ch.say("hi", sender_id="stranger")
        await ch.say("/memory", sender_id="stranger")
        await ch.say("hi", sender_id="boss", chat_id="2")
        replies = await ch.wait_replies(3)
    # Sessions run concurrently: tell the requests apart by their chat, never by their order.
    [guest] = [r for r in fake_llm.requests if "chat_id: 1" in r["messages"][-1]["content"]]
    [owner] = [r for r in fake_llm.requests if "chat_id: 2" in r["messages"][-1]["content"]]
    assert "tools" not in guest or not guest["tools"]
    assert "secret owner fact" not in json.dumps(guest)
    assert any(r.text.startswith("/memory is only for the owner") for r in replies)
    assert "exec" in {t["function"]["name"] for t in owner["tools"]}
    assert "secret owner fact" in owner["messages"][0]["content"]


async def test_system_prompt_is_byte_stable_between_turns(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    async with running(make_config()) as (gw, ch):
        await ch.say("one", **OWNER)
        await ch.wait_replies(1)
        await ch.say("two", **OWNER)
        await ch.wait_replies(2)
    first, second = fake_llm.requests
    assert first["messages"][0] == second["messages"][0]
    assert first["tools"] == second["tools"]


async def test_message_tool_reaches_another_chat(fake_llm: FakeLLMServer, make_config: Callable) -> None:
    fake_llm.queue(ToolCalls([("message", {"chat_id": "other", "text": "ping from A"}),
                              ("message", {"channel": "nowhere", "chat_id": "1", "text": "x"})]),
                   Reply("sent"))
    async with running(make_config()) as (gw, ch):
        await ch.say("tell the other chat", **OWNER)
        await ch.wait_replies(2)
    texts = {(m.target.chat_id, m.text) for m in ch.replies()}
    assert ("other", "ping from A") in texts and ("1", "sent") in texts
    results = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0] == "sent to cli:other" and "not running" in results[1]


async def test_streaming_channel_gets_previews_then_one_final_reply(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha")
    long_text = "The file says alpha. " * 20
    fake_llm.queue(ToolCalls([("read_file", {"path": "a.txt"})]), Reply(long_text))
    config = make_config(providers={"openai": {"streamToolCalls": True}})  # the fake streams them
    async with running(config) as (gw, ch):
        gw.parts.agent.runner.streaming_channels = frozenset({"cli"})
        await ch.say("stream please", **OWNER)
        [reply] = await ch.wait_replies(1)
    assert all(r.get("stream") is True for r in fake_llm.requests)
    previews = [m.text for m in ch.sent if m.kind == "progress"]
    assert previews and all(long_text.strip().startswith(p.strip()) for p in previews)
    assert reply.kind == "text" and reply.text == long_text.strip()
    tool_results = [m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_results and "alpha" in tool_results[0]["content"]  # tool calls survive streaming


async def test_estimate_is_an_upper_bound_and_skips_the_tokenizer_when_small(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    from lucidgate.gateway.agent.runner import PromptEstimator
    from lucidgate.memory import tokens

    async with running(make_config()) as (gw, ch):
        await ch.say("héllo wörld 你好 " * 20, **OWNER)
        await ch.wait_replies(1)
        session = await gw.parts.sessions.get("cli:1")
        ctx = gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="",
                                                        role="owner"))
        exact = PromptEstimator(gw.parts.builder, gw.parts.tools)  # no budget: always counts
        bounded = PromptEstimator(gw.parts.builder, gw.parts.tools, budget=10**9)
        tight = PromptEstimator(gw.parts.builder, gw.parts.tools, budget=10)
        precise = await exact.estimate(session, ctx)
        assert await bounded.estimate(session, ctx) >= precise
        assert await tight.estimate(session, ctx) == precise  # over the bound: the exact count
        would_send = await gw.parts.builder.build(session, ctx)
        sent = tokens.count_messages(would_send) + tokens.count_tools(gw.parts.tools.schemas(ctx))
        assert abs(precise - sent) < 0.05 * sent  # the estimate tracks the real prompt


async def test_a_guest_chat_is_sized_without_the_owners_memory(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    config = make_config(agents={"defaults": {"contextWindowTokens": 4000, "maxCompletionTokens": 500}},
                         channels={"webhook": {"owners": ["boss"]}})
    async with running(config, name="webhook") as (gw, ch):
        (workspace / "USER.md").write_text("# User\n" + "- a long owner fact about many things\n" * 300)
        await ch.say("hi", sender_id="stranger")
        await ch.wait_replies(1)
        await ch.say("again", sender_id="stranger")
        await ch.wait_replies(2)
        await gw.parts.agent.idle()  # the background check is scheduled after the reply
        await gw.parts.consolidator.drain()
    # two turns, no summarisation call: the owner's big USER.md never counted against a guest chat
    assert len(fake_llm.requests) == 2
    assert not (workspace / "memory" / "history.jsonl").exists() or \
        (workspace / "memory" / "history.jsonl").read_text() == ""


async def test_a_tool_result_is_an_error_by_its_flag_not_by_its_text(fake_llm: FakeLLMServer, make_config: Callable,
                                                                      workspace: Path) -> None:
    (workspace / "build.log").write_text("Error: the nightly build failed at step 3\n")
    fake_llm.queue(ToolCalls([("read_file", {"path": "build.log"}), ("read_file", {"path": "missing.txt"})]),
                   Reply("step 3 failed"))
    async with running(make_config()) as (gw, ch):
        await ch.say("what does build.log say?", **OWNER)
        await ch.wait_replies(1)
        metrics = gw.parts.metrics.render().decode()
    # The log file's text begins "Error:", yet reading it worked; the missing file did not.
    assert 'lucid_tool_calls_total{status="ok",tool="read_file"} 1.0' in metrics
    assert 'lucid_tool_calls_total{status="error",tool="read_file"} 1.0' in metrics
