"""The heartbeat: silent when there is nothing to do, an owner turn with tools in its own
session when there is, NO_REPLY dropped, anything else forwarded to the configured chat, a
daily budget."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.scheduler import SchedulerService
from lucidgate.scheduler.heartbeat import heartbeat_tasks
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import Fail, FakeLLMServer, Reply, ToolCalls
from tests.waiting import until

TASKS = "# Heartbeat tasks\n\n<!-- - not a task, a commented example -->\n- Check whether the plants need water\n"


@asynccontextmanager
async def running(config: Any) -> AsyncIterator[tuple[Gateway, FakeChannel, SchedulerService]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    service = gw.parts.scheduler
    async with gw:
        yield gw, channel, service


def beat_config(make_config: Callable, *, target: bool = True, **heartbeat: Any) -> Any:
    section: dict[str, Any] = {"enabled": True, "intervalMin": 0.005, **heartbeat}  # every 0.3 s
    if target:
        section["target"] = {"channel": "cli", "chatId": 1}
    return make_config(agents={"defaults": {"llmRetries": 0, "heartbeat": section}})


def write_heartbeat(workspace: Path, text: str) -> None:
    (workspace / "HEARTBEAT.md").write_text(text)


def state(workspace: Path) -> dict[str, Any]:
    path = workspace / "state" / "scheduler.json"
    return json.loads(path.read_text())["jobs"].get("heartbeat", {}) if path.exists() else {}


async def more_beats(workspace: Path, count: int = 2, timeout: float = 60.0) -> None:
    """Wait until ``count`` more beats have finished (each records a new ``last_run``)."""
    seen = {state(workspace).get("last_run")}

    def new_beats() -> bool:
        seen.add(state(workspace).get("last_run"))
        return len(seen) > count

    await until(new_beats, timeout)



def test_only_bullets_outside_comments_are_tasks() -> None:
    assert heartbeat_tasks("# Tasks\n<!-- - example\n- another -->\n") == []
    assert heartbeat_tasks("intro\n- water plants\n  * check mail \n-not a bullet\n- \n") == [
        "water plants", "check mail"]
    assert heartbeat_tasks("- real\n<!-- unclosed\n- hidden\n") == ["real"]
    assert heartbeat_tasks("- [x] paid the rent\n* [X] done too\n- [ ] call the bank\n") == [
        "[ ] call the bank"]  # checked boxes are finished tasks
    template = (Path(__file__).parents[1] / "config" / "templates" / "HEARTBEAT.md").read_text()
    assert heartbeat_tasks(template) == []  # the shipped template costs nothing


async def test_no_tasks_means_no_llm_calls(fake_llm: FakeLLMServer, make_config: Callable,
                                           workspace: Path) -> None:
    write_heartbeat(workspace, "# Heartbeat tasks\n\n<!-- - add tasks like this -->\n")
    async with running(beat_config(make_config)) as (_, ch, svc):
        assert "heartbeat every 0.005 min" in svc.status_line()
        await until(lambda: state(workspace).get("last_result", "").startswith("idle"))
        await more_beats(workspace, 2)
    assert fake_llm.requests == [] and ch.sent == []


async def test_no_reply_is_dropped_and_the_turn_stays_in_its_own_session(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_heartbeat(workspace, TASKS)
    fake_llm.default = lambda request: Reply("NO_REPLY")
    async with running(beat_config(make_config)) as (_, ch, _):
        await fake_llm.wait_for_requests(2, timeout=60)
        await until(lambda: state(workspace).get("last_reply") == "nothing due (NO_REPLY)")
    assert ch.replies() == []
    prompt = fake_llm.last_user_text(fake_llm.requests[0])
    assert "- Check whether the plants need water" in prompt and "NO_REPLY" in prompt
    assert "not a task" not in prompt
    tools = {t["function"]["name"] for t in fake_llm.requests[0].get("tools") or []}
    assert {"read_file", "write_file", "exec", "cron"} <= tools  # the owner's tools
    assert (workspace / "sessions" / "heartbeat_main.jsonl").exists()
    assert not (workspace / "sessions" / "cli_1.jsonl").exists()  # never the user's history


async def test_something_to_say_goes_to_the_target_chat(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_heartbeat(workspace, TASKS)
    fake_llm.queue(Reply("The basil looks dry: water it today."))
    fake_llm.default = lambda request: Reply("NO_REPLY")
    async with running(beat_config(make_config)) as (_, ch, _):
        [msg] = await ch.wait_replies(1)
        await fake_llm.wait_for_requests(2, timeout=60)  # the next beat said NO_REPLY
        await until(lambda: state(workspace).get("last_reply") == "nothing due (NO_REPLY)")
    assert msg.text == "The basil looks dry: water it today."  # type: ignore[union-attr]
    assert (msg.target.channel, msg.target.chat_id) == ("cli", "1")
    assert len(ch.replies()) == 1


async def test_without_a_target_the_message_is_logged_not_sent(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_heartbeat(workspace, TASKS)
    fake_llm.default = lambda request: Reply("Water the plants!")
    with caplog.at_level(logging.WARNING, logger="lucidgate.scheduler"):
        async with running(beat_config(make_config, target=False)) as (_, ch, _):
            await until(lambda: "heartbeat.target is not set" in caplog.text)
    assert ch.sent == []


async def test_llm_failure_in_a_beat_is_logged_and_the_next_beat_still_runs(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_heartbeat(workspace, TASKS)
    fake_llm.queue(Fail(500, "upstream exploded"))
    fake_llm.default = lambda request: Reply("NO_REPLY")
    with caplog.at_level(logging.WARNING, logger="lucidgate.scheduler"):
        async with running(beat_config(make_config)) as (_, ch, svc):
            await fake_llm.wait_for_requests(2, timeout=60)
            await until(lambda: state(workspace).get("last_reply") == "nothing due (NO_REPLY)")
            assert svc.running
    assert "heartbeat turn failed" in caplog.text
    assert ch.sent == []


async def test_the_daily_token_budget_stops_beats(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_heartbeat(workspace, TASKS)
    fake_llm.default = lambda request: Reply("NO_REPLY", prompt_tokens=1500, completion_tokens=10)
    with caplog.at_level(logging.INFO, logger="lucidgate.scheduler"):
        async with running(beat_config(make_config, tokenBudget=1000)) as (_, _, _):
            await until(lambda: "budget spent" in state(workspace).get("last_result", ""))
            await more_beats(workspace, 2)  # later beats came, and were skipped
    assert len(fake_llm.requests) == 1  # the first beat spent the budget; the rest were skipped
    assert "heartbeat skipped: 1510 tokens used today, budget 1000" in caplog.text


async def test_budget_spent_by_an_earlier_run_today_counts(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_heartbeat(workspace, TASKS)
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    (workspace / "usage").mkdir()
    (workspace / "usage" / f"{day}.jsonl").write_text(json.dumps({
        "ts": f"{day}T00:00:01+00:00", "job": "chat", "session": "heartbeat:main", "model": "m",
        "prompt": 60_000, "completion": 0, "cached": 0}) + "\n")
    async with running(beat_config(make_config)) as (_, _, _):
        await until(lambda: "budget spent (60000 of 50000" in state(workspace).get("last_result", ""))
    assert fake_llm.requests == []


async def test_heartbeat_is_off_by_default(fake_llm: FakeLLMServer, make_config: Callable,
                                           workspace: Path) -> None:
    write_heartbeat(workspace, TASKS)
    async with running(make_config()) as (gw, _, svc):
        assert "heartbeat off" in svc.status_line()
        assert not gw.parts.bus.has_route("heartbeat")
        assert svc._job("heartbeat") is None  # no job: nothing that could ever beat
    assert fake_llm.requests == []


async def test_only_finished_tasks_cost_nothing(fake_llm: FakeLLMServer, make_config: Callable,
                                                workspace: Path) -> None:
    write_heartbeat(workspace, "# Heartbeat tasks\n\n- [x] renew the passport\n")
    async with running(beat_config(make_config)) as (_, ch, _):
        await until(lambda: state(workspace).get("last_result", "").startswith("idle"))
    assert fake_llm.requests == [] and ch.sent == []


async def test_a_beat_acts_with_the_owners_tools(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    """A tool call the model makes during a beat runs, as the owner, and the beat reports."""
    write_heartbeat(workspace, "- Each morning, append today's weather note to notes/log.md\n")
    (workspace / "USER.md").write_text("# User\n- Prefers Celsius\n")
    fake_llm.queue(
        ToolCalls([("write_file", {"path": "notes/log.md", "content": "sunny, 21 C\n"})]),
        Reply("Logged today's weather in notes/log.md."),
    )
    fake_llm.default = lambda request: Reply("NO_REPLY")
    async with running(beat_config(make_config)) as (_, ch, _):
        [msg] = await ch.wait_replies(1, timeout=20)
        await until(lambda: state(workspace).get("last_reply", "").startswith("sent to cli:1"))
    assert (workspace / "notes" / "log.md").read_text() == "sunny, 21 C\n"
    assert msg.text == "Logged today's weather in notes/log.md."  # type: ignore[union-attr]
    second = fake_llm.requests[1]
    results = [m for m in second["messages"] if m.get("role") == "tool"]
    assert results and results[0]["content"].startswith("Created notes/log.md")
    # The beat ran with the owner's memory in its prompt, in its own session only.
    assert "Prefers Celsius" in second["messages"][0]["content"]
    lines = [json.loads(line) for line in
             (workspace / "sessions" / "heartbeat_main.jsonl").read_text().splitlines()]
    assert any(m.get("name") == "write_file" for m in lines)
    assert not (workspace / "state" / "owner_sessions.json").exists() or "heartbeat:main" not in (
        workspace / "state" / "owner_sessions.json").read_text()


async def test_a_beat_stops_at_what_is_left_of_the_daily_budget(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    """A beat whose tool loop would run past the day's budget is cut off, not let run on."""
    write_heartbeat(workspace, TASKS)
    fake_llm.default = lambda request: ToolCalls([("list_dir", {"path": "."})],
                                                 prompt_tokens=800, completion_tokens=10)
    async with running(beat_config(make_config, tokenBudget=1500)) as (_, ch, _):
        await until(lambda: "turn failed" in state(workspace).get("last_reply", ""))
    assert len(fake_llm.requests) == 2  # 810 + 810 >= 1500: the third call is refused
    assert "token budget" in state(workspace)["last_reply"]
    assert ch.sent == []
