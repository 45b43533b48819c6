"""Crash recovery and /stop: interrupted turns are finished once, stopped ones never."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage
from lucidgate.gateway.app import build_gateway
from lucidgate.memory.sessions import load_session_file
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Hang, Reply, ToolCalls

CALL = {"id": "call_9", "type": "function", "function": {"name": "exec", "arguments": '{"command": "touch ran"}'}}


def write_session(workspace: Path, lines: list[dict[str, Any]]) -> Path:
    folder = workspace / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    header = {"_type": "metadata", "v": 1, "key": "cli:1", "created_at": "2026-01-01T00:00:00+00:00",
              "updated_at": "2026-01-01T00:00:00+00:00", "last_consolidated": 0,
              "metadata": {"origin": {"channel": "cli", "chat_id": "1", "chat_type": "private"}}}
    path = folder / "cli_1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *lines]))
    return path


async def start_and_collect(config: Any, expected: int, settle: float = 0.3) -> FakeChannel:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        if expected:
            await channel.wait_replies(expected)
        await asyncio.sleep(settle)
        await gw.parts.agent.idle()
    return channel


async def test_pending_user_turn_is_answered_once_after_restart(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_session(workspace, [{"role": "user", "content": "did you get this?", "sender_id": "local"}])
    fake_llm.queue(Reply("yes, got it"))
    channel = await start_and_collect(make_config(), 1)
    assert [r.text for r in channel.replies()] == ["yes, got it"]
    assert fake_llm.requests[0]["messages"][-1]["content"].endswith("did you get this?")
    # a second restart finds nothing pending: no second answer, no LLM call
    channel = await start_and_collect(make_config(), 0)
    assert channel.replies() == [] and len(fake_llm.requests) == 1


async def test_interrupted_tool_step_is_not_re_executed(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_session(workspace, [
        {"role": "user", "content": "make a file", "sender_id": "local"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
    ])
    fake_llm.queue(Reply("The command was interrupted; shall I retry?"))
    channel = await start_and_collect(make_config(), 1)
    assert channel.replies()[0].text.startswith("The command was interrupted")
    assert not (workspace / "ran").exists()
    tool_msgs = [m for m in fake_llm.requests[0]["messages"] if m["role"] == "tool"]
    assert tool_msgs and "interrupted" in tool_msgs[0]["content"]
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert session.pending_state() is None


async def test_inbox_replays_a_message_that_never_reached_its_session(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    journal = InboxJournal(workspace / "inbox.jsonl")
    journal.open()
    journal.append(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="from the inbox",
                                  message_id="t-1"))
    journal.close()
    fake_llm.queue(Reply("answered"))
    channel = await start_and_collect(make_config(), 1)
    assert [r.text for r in channel.replies()] == ["answered"]
    lines = (workspace / "sessions" / "cli_1.jsonl").read_text()
    assert lines.count("from the inbox") == 1
    # the same platform message delivered again is recognised as a duplicate
    gw = build_gateway(make_config())
    gw.add_channel("cli", FakeChannel(gw.parts.bus, name="cli"))
    async with gw:
        accepted = await gw.parts.bus.publish_inbound(InboundMessage(
            channel="cli", chat_id="1", sender_id="local", text="from the inbox", message_id="t-1"))
    assert accepted is False and len(fake_llm.requests) == 1


async def test_stop_cancels_the_turn_and_it_is_not_resumed(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.queue(Hang(10))
    gw = build_gateway(make_config(agents={"defaults": {"llmTimeoutS": 30}}))
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("think for a long time", sender_id="local")
        await fake_llm.wait_for_requests(1)
        stop_id = await channel.say("/stop", sender_id="local")
        replies = await channel.wait_replies(2)
        by_id = {r.in_reply_to: r.text for r in replies}
        assert by_id[stop_id] == "Stopping…"  # the /stop itself is answered (webhook waiters)
        assert "Stopped." in by_id.values()
        await channel.say("/stop", sender_id="local")
        replies = await channel.wait_replies(3)
        assert replies[2].text == "Nothing is running right now."
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert session.messages[-1]["status"] == "cancelled" and session.pending_state() is None
    channel = await start_and_collect(make_config(), 0)
    assert channel.replies() == [] and len(fake_llm.requests) == 1


async def test_shutdown_grace_cuts_a_turn_which_resumes_next_start(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    config = make_config(agents={"defaults": {"llmTimeoutS": 30}}, gateway={"shutdownGraceS": 0.2})
    fake_llm.queue(Hang(5), Reply("after restart"))
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("slow one", sender_id="local")
        await fake_llm.wait_for_requests(1)
    assert channel.replies() == []
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert session.pending_state() == "pending_user_turn"
    channel = await start_and_collect(config, 1)
    assert [r.text for r in channel.replies()] == ["after restart"]


async def test_tool_results_survive_a_crash_mid_turn(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha")
    config = make_config(agents={"defaults": {"llmTimeoutS": 30}}, gateway={"shutdownGraceS": 0})
    fake_llm.queue(ToolCalls([("read_file", {"path": "a.txt"})]), Hang(5), Reply("it says alpha"))
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("read a.txt", sender_id="local")
        await fake_llm.wait_for_requests(2)
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert session.pending_state() == "runtime_checkpoint"
    channel = await start_and_collect(config, 1)
    assert channel.replies()[0].text == "it says alpha"
    resumed = fake_llm.requests[2]["messages"]
    assert resumed[-1]["role"] == "tool" and "alpha" in resumed[-1]["content"]


async def test_a_journal_larger_than_the_queue_replays_fully(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    journal = InboxJournal(workspace / "inbox.jsonl")
    journal.open()
    for i in range(1100):  # more than the bus's bounded queue holds
        journal.append(InboundMessage(channel="cli", chat_id=str(i % 7), sender_id="local", text="/help",
                                      message_id=f"h{i}"))
    journal.close()
    channel = await start_and_collect(make_config(), 1100, settle=0)
    assert len(channel.replies()) == 1100 and fake_llm.requests == []


async def test_a_replayed_message_already_answered_is_not_answered_again(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    journal = InboxJournal(workspace / "inbox.jsonl")
    journal.open()
    receipt = journal.append(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="hi",
                                            message_id="x-1"))
    journal.close()  # the "done" mark was lost in the crash...
    write_session(workspace, [  # ...but the turn had finished
        {"role": "user", "content": "hi", "sender_id": "local", "inbox": receipt},
        {"role": "assistant", "content": "hello!"},
    ])
    channel = await start_and_collect(make_config(), 0)
    assert channel.replies() == [] and fake_llm.requests == []
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert [m["content"] for m in session.messages] == ["hi", "hello!"]


async def test_a_replayed_message_answered_and_since_archived_is_not_answered_again(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    """A power loss can drop the journal's unsynced "done" mark after the turn finished and
    its lines were archived (the session then holds them as markers, not dicts): the
    replay still finds the user line, in the file."""
    journal = InboxJournal(workspace / "inbox.jsonl")
    journal.open()
    receipt = journal.append(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="hi",
                                            message_id="x-1"))
    journal.close()
    path = write_session(workspace, [
        {"role": "user", "content": "hi", "sender_id": "local", "inbox": receipt},
        {"role": "assistant", "content": "hello!"},
        {"role": "user", "content": "later", "sender_id": "local", "inbox": "other"},
        {"role": "assistant", "content": "sure"},
    ])
    path.with_name("cli_1.state.json").write_text(json.dumps({"last_consolidated": 2}))  # archived
    channel = await start_and_collect(make_config(), 0)
    assert channel.replies() == [] and fake_llm.requests == []
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert [m["content"] for m in session.messages] == ["hi", "hello!", "later", "sure"]


async def test_a_channel_that_fails_to_start_does_not_stop_the_others(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    class Broken(FakeChannel):
        async def start(self) -> None:
            raise RuntimeError("the platform refused the token")

    gw = build_gateway(make_config())
    good = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", good)
    gw.add_channel("telegram", Broken(gw.parts.bus, name="telegram"))
    fake_llm.queue(Reply("still here"))
    async with gw:
        await good.say("anyone?", sender_id="local")
        [reply] = await good.wait_replies(1)
        assert "telegram" not in gw.channels and "refused the token" in gw.failed_channels["telegram"]
    assert reply.text == "still here"


async def test_a_resumed_scheduled_turn_keeps_its_role_and_its_token_budget(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    # The heartbeat (an internal owner job) and a budgeted task were cut off by a crash.
    write_session(workspace, [{"role": "user", "content": "[heartbeat] check the todo list",
                               "sender_id": "heartbeat", "task": "heartbeat", "task_role": "owner",
                               "task_internal": True, "task_budget": 1000}])
    fake_llm.default = lambda request: ToolCalls([("list_dir", {"path": "."})],
                                                 prompt_tokens=700, completion_tokens=10)
    channel = await start_and_collect(make_config(), 1)
    first = fake_llm.requests[0]
    assert "exec" in {t["function"]["name"] for t in first["tools"]}  # an owner's tools, not a guest's
    assert "(owner)" in str(first["messages"][-1]["content"])
    [reply] = channel.replies()
    assert reply.kind == "error" and "token budget" in reply.text  # type: ignore[union-attr]
    assert len(fake_llm.requests) == 2  # 710 + 710 >= 1000: the budget held after the restart


async def test_an_old_task_line_without_its_role_resumes_as_a_guest(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_session(workspace, [{"role": "user", "content": "[task] tidy", "sender_id": "local", "task": "task:3"}])
    fake_llm.queue(Reply("done"))
    await start_and_collect(make_config(), 1)
    assert "(guest)" in str(fake_llm.requests[0]["messages"][-1]["content"])


async def test_an_answer_already_in_the_outbox_completes_the_transcript_instead_of_a_second_turn(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    from lucidgate.channels.messages import OutboundText, Target
    from lucidgate.channels.outbox import Outbox

    # Killed after the outbox recorded the answer, before the transcript line was written.
    write_session(workspace, [{"role": "user", "content": "what is it?", "sender_id": "local",
                               "message_id": "m-1"}])
    (workspace / "state").mkdir(parents=True, exist_ok=True)
    outbox = Outbox(workspace / "state" / "outbox.sqlite", deadlines_s={"cli": 24 * 3600.0})
    outbox.record(OutboundText(Target("cli", "1", reply_to="m-1"), "the recorded answer", in_reply_to="m-1"))
    outbox.close()
    channel = await start_and_collect(make_config(), 1)
    assert [r.text for r in channel.replies()] == ["the recorded answer"]  # sent once, by the outbox
    assert fake_llm.requests == []  # no second turn
    lines = load_session_file(workspace / "sessions" / "cli_1.jsonl").messages
    assert lines[-1]["role"] == "assistant" and lines[-1]["content"] == "the recorded answer"
    channel = await start_and_collect(make_config(), 0)  # and nothing is pending any more
    assert channel.replies() == [] and fake_llm.requests == []
