"""A session's state lives with its work: /stop acts on the item in hand and leaves nothing
behind, and a reminder line queued behind a session's work is written whatever happens next
(the worker going idle, the gateway stopping). Windows are held open with events, never sleeps."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from lucidgate.config.schema import Config
from lucidgate.gateway.agent.loop import STOPPED_NOTE
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.memory.sessions import load_session_file
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Hang, HeldReply, Reply, Scripted
from tests.waiting import until

OWNER = dict(sender_id="local")
LONG = "Notes from the planning meeting. " + " ".join(
    f"Point {i}: the spring party is at the boathouse on pier {i}." for i in range(40))


@asynccontextmanager
async def running(config: Config) -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli", owners=gw.parts.config.channels.owners_of("cli"))
    gw.add_channel("cli", channel)
    async with gw:
        yield gw, channel


def transcript(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / "sessions" / "cli_1.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


# ----------------------------------------------------------------------------- /stop


async def test_stop_during_compact_stops_nothing_and_the_next_message_is_answered(
    fake_llm: FakeLLMServer, make_config: Callable[..., Config], workspace: Path
) -> None:
    release = threading.Event()
    try:
        async with running(make_config()) as (gw, ch):
            for n, word in enumerate(("alpha", "bravo", "charlie"), 1):
                fake_llm.queue(Reply(f"noted {word}"))
                await ch.say(f"remember {word}", **OWNER)
                await ch.wait_replies(n)
            fake_llm.queue(HeldReply("- the user listed alpha and bravo", release), Reply("the answer"))
            await ch.say("/compact", **OWNER)
            await fake_llm.wait_for_requests(4)  # the summary is being written
            stop_id = await ch.say("/stop", **OWNER)
            [*_, stop_reply] = await ch.wait_replies(4)
            await ch.say("what now?", **OWNER)  # queued behind /compact
            release.set()
            replies = await ch.wait_replies(6)
    finally:
        release.set()
    assert stop_reply.in_reply_to == stop_id
    assert stop_reply.text.startswith("Nothing to stop: /compact is running")
    assert replies[4].text.startswith("Compacted: ")
    assert replies[5].text == "the answer"  # not "Stopped.": no flag was left behind
    assert STOPPED_NOTE not in json.dumps(transcript(workspace))


async def test_stop_during_the_memory_flush_stops_nothing_and_the_next_message_is_answered(
    fake_llm: FakeLLMServer, make_config: Callable[..., Config], workspace: Path
) -> None:
    """The silent flush turn runs in the session's worker after the answer went out."""
    release = threading.Event()
    config = make_config(agents={"defaults": {"workingSetTokens": 256, "timezone": "UTC"}})

    def answer(request: dict[str, Any]) -> Scripted:
        asked = fake_llm.last_user_text(request)
        if "[memory flush" in asked:
            return HeldReply("NO_REPLY", release)
        if not request.get("tools"):  # the consolidator's summary
            return Reply("- the user shared meeting notes")
        return Reply("second answer" if asked.endswith("and now?") else "first answer")

    fake_llm.default = answer
    try:
        async with running(config) as (gw, ch):
            await ch.say(LONG, **OWNER)
            await ch.wait_replies(1)
            await fake_llm.wait_for_requests(2)  # the flush turn is with the model
            assert "memory flush" in fake_llm.last_user_text()
            stop_id = await ch.say("/stop", **OWNER)
            [_, stop_reply] = await ch.wait_replies(2)
            await ch.say("and now?", **OWNER)
            release.set()
            replies = await ch.wait_replies(3)
    finally:
        release.set()
    assert stop_reply.in_reply_to == stop_id and stop_reply.text.startswith("Nothing to stop: saving")
    assert replies[2].text == "second answer"
    assert STOPPED_NOTE not in json.dumps(transcript(workspace))


async def test_stop_still_stops_a_running_turn_and_nothing_is_left_for_the_next(
    fake_llm: FakeLLMServer, make_config: Callable[..., Config]
) -> None:
    fake_llm.queue(Hang(30), Reply("fresh answer"))
    async with running(make_config(agents={"defaults": {"llmTimeoutS": 60}})) as (gw, ch):
        await ch.say("think long", **OWNER)
        await fake_llm.wait_for_requests(1)
        await ch.say("/stop", **OWNER)
        replies = await ch.wait_replies(2)
        assert sorted(r.text for r in replies) == ["Stopped.", "Stopping…"]
        await ch.say("/stop", **OWNER)
        await ch.say("next", **OWNER)
        replies = await ch.wait_replies(4)
    assert [r.text for r in replies[2:]] == ["Nothing is running right now.", "fresh answer"]


# ----------------------------------------------------------------------------- reminder lines


async def test_a_reminder_arriving_while_another_is_written_is_written_without_a_next_message(
    fake_llm: FakeLLMServer, make_config: Callable[..., Config], workspace: Path
) -> None:
    fake_llm.queue(Reply("first"))
    gw = build_gateway(make_config())
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    agent, sessions = gw.parts.agent, gw.parts.sessions
    writing, release = asyncio.Event(), asyncio.Event()
    real_append = sessions.append

    async def append(session: Any, *lines: dict[str, Any], sync: bool = False) -> None:
        if any(line.get("content") == "one" for line in lines):
            await agent.record_reminder(session.key, "reminder: water the plants")  # mid-turn
        if any(line.get("content") == "reminder: water the plants" for line in lines):
            writing.set()
            await release.wait()
        await real_append(session, *lines, sync=sync)

    sessions.append = append  # type: ignore[method-assign]
    async with gw:
        await channel.say("one", sender_id="local")
        await asyncio.wait_for(writing.wait(), 30)
        await agent.record_reminder("cli:1", "reminder: feed the cat")  # the worker is busy writing
        release.set()
        await until(lambda: "feed the cat" in (workspace / "sessions" / "cli_1.jsonl").read_text(),
                    timeout=20, what="the second reminder line")
    texts = [line.get("content") for line in transcript(workspace)]
    assert texts == ["one", "first", "reminder: water the plants", "reminder: feed the cat"]


async def test_a_reminder_parked_behind_a_turn_is_written_when_the_gateway_stops(
    fake_llm: FakeLLMServer, make_config: Callable[..., Config], workspace: Path
) -> None:
    config = make_config(agents={"defaults": {"llmTimeoutS": 60}}, gateway={"shutdownGraceS": 0})
    fake_llm.queue(Hang(30))
    async with running(config) as (gw, ch):
        await ch.say("slow question", **OWNER)
        await fake_llm.wait_for_requests(1)
        await gw.parts.agent.record_reminder("cli:1", "reminder: call mum")  # parked: the turn runs
    lines = transcript(workspace)
    assert [line.get("content") for line in lines] == ["slow question", "reminder: call mum"]
    session = load_session_file(workspace / "sessions" / "cli_1.jsonl")
    assert session.pending_state() == "pending_user_turn"  # the cut turn still resumes

    fake_llm.queue(Reply("resumed answer"))
    async with running(config) as (gw, ch):
        [answer] = await ch.wait_replies(1)
    assert answer.text == "resumed answer"
    prompt = [(m["role"], m["content"]) for m in fake_llm.requests[-1]["messages"][1:]]
    assert prompt[0] == ("assistant", "reminder: call mum")  # shown before the open question
    assert prompt[1][0] == "user" and prompt[1][1].endswith("slow question")
