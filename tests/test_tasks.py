"""Scheduled tasks end to end: the cron tool stores a task, the scheduler publishes it on the
bus when it comes due, the agent loop runs a real turn (fake LLM over HTTP) as the user who
set it, and the answer reaches the chat and the transcript."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lucidgate.channels.messages import InboundMessage
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.cli import build_app
from lucidgate.scheduler import ReminderStore, SchedulerService
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Func, Reply, ToolCalls
from tests.test_reminders import local_iso, rows

TZ = "Europe/Berlin"


@asynccontextmanager
async def running(config: Any) -> AsyncIterator[tuple[Gateway, FakeChannel, SchedulerService]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    gw.parts.scheduler.reminders.min_every_s = 1
    async with gw:
        yield gw, channel, gw.parts.scheduler


def config_for(make_config: Callable, **extra: Any) -> Any:
    return make_config(agents={"defaults": {"timezone": TZ, "llmRetries": 0, **extra}},
                       tools={"guestTools": ["cron"]})


async def cron(gw: Gateway, sender: str = "local", **arguments: Any) -> str:
    ctx = gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id="1", sender_id=sender,
                                                    text="", message_id="m1",
                                                    role="owner" if sender == "local" else "guest"))
    return await gw.parts.tools.execute(ctx, "cron", arguments)


def tool_names(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def is_task_turn(request: dict[str, Any]) -> bool:
    users = [m for m in request["messages"] if m["role"] == "user"]
    return "[Scheduled task #" in str(users[-1].get("content"))


def transcript(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / "sessions" / "cli_1.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_an_owner_task_runs_a_turn_with_tools_and_answers_in_the_chat(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    (workspace / "todo.md").write_text("- buy milk\n- call the plumber\n")
    task_requests: list[dict[str, Any]] = []

    def script(request: dict[str, Any]) -> Any:
        if not is_task_turn(request):
            if any(m["role"] == "tool" for m in request["messages"]):
                return Reply("Done: I'll summarise your todos in a moment.")
            return ToolCalls([("cron", {"action": "add", "at": local_iso(timedelta(seconds=2)),
                                        "task": "Summarise my open todos from todo.md"})])
        task_requests.append(request)
        if len(task_requests) == 1:
            return ToolCalls([("read_file", {"path": "todo.md"})])
        return Reply("You have 2 open todos: buy milk, call the plumber.")

    fake_llm.default = lambda request: Func(script)
    async with running(config_for(make_config)) as (gw, ch, _):
        await ch.say("summarise my todos in two seconds", sender_id="local")
        await ch.wait_replies(2, timeout=60)
    texts = [m.text for m in ch.replies()]  # type: ignore[union-attr]
    assert texts == ["Done: I'll summarise your todos in a moment.",
                     "You have 2 open todos: buy milk, call the plumber."]
    assert {"read_file", "exec", "write_file"} <= tool_names(task_requests[0])  # the owner's tools
    tool_result = next(m for m in task_requests[1]["messages"] if m.get("name") == "read_file")
    assert "buy milk" in tool_result["content"]
    lines = transcript(workspace)
    task_line = next(m for m in lines if m.get("task") == "task:1")
    assert task_line["role"] == "user" and "Summarise my open todos" in task_line["content"]
    assert lines[-1] == {**lines[-1], "role": "assistant",
                         "content": "You have 2 open todos: buy milk, call the plumber."}
    [row] = rows(workspace)
    assert (row["purpose"], row["creator_id"], row["creator_role"], row["status"]) == (
        "task", "local", "owner", "done")


async def test_a_guests_task_runs_as_a_guest(fake_llm: FakeLLMServer, make_config: Callable,
                                             workspace: Path) -> None:
    seen: list[dict[str, Any]] = []

    def script(request: dict[str, Any]) -> Any:
        seen.append(request)
        return Reply("Here is your daily quote.")

    fake_llm.default = lambda request: Func(script)
    async with running(config_for(make_config)) as (gw, ch, _):
        added = await cron(gw, sender="visitor", action="add", at=local_iso(timedelta(seconds=1)),
                           task="Send me a quote")
        assert added.startswith("Task #1 set") and "guest's abilities" in added
        await ch.wait_replies(1, timeout=60)
    [request] = seen
    assert tool_names(request) == {"cron"}  # only what tools.guestTools grants a guest
    assert "sender: visitor (guest)" in str(request["messages"][-1]["content"])
    assert rows(workspace)[0]["creator_role"] == "guest"


async def test_a_task_stops_at_its_token_budget(fake_llm: FakeLLMServer, make_config: Callable,
                                                workspace: Path) -> None:
    fake_llm.default = lambda request: ToolCalls([("list_dir", {"path": "."})],
                                                 prompt_tokens=700, completion_tokens=10)
    config = config_for(make_config, tasks={"tokenBudget": 1000})
    async with running(config) as (gw, ch, _):
        await cron(gw, action="add", at=local_iso(timedelta(seconds=1)), task="Tidy the workspace")
        [reply] = await ch.wait_replies(1, timeout=60)
    assert reply.kind == "error" and "token budget" in reply.text  # type: ignore[union-attr]
    assert len(fake_llm.requests) == 2  # 710 + 710 >= 1000: the third call is refused
    assert transcript(workspace)[-1]["status"] == "error"


async def test_tasks_are_listed_paused_resumed_and_removed(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    config = config_for(make_config)
    async with running(config) as (gw, ch, service):
        assert (await cron(gw, action="add", cron="0 8 * * 1-5", task="Summarise my todos")
                ).startswith("Task #1 set (cron '0 8 * * 1-5'")
        await cron(gw, action="add", every=3600, text="stretch")
        listing = await cron(gw, action="list")
        assert "#1 [task] cron '0 8 * * 1-5'" in listing and "#2 every 1 h" in listing
        assert (await cron(gw, action="pause", id=1)).startswith("Paused task #1")
        assert service._scheduler.get_job("reminder:1") is None  # type: ignore[union-attr]
        assert "#1 [task] [paused]" in await cron(gw, action="list")
        assert (await cron(gw, action="pause", id=1)).startswith("Error: there is no active")
        assert (await cron(gw, action="resume", id=1)).startswith("Resumed task #1, next ")
        assert service._scheduler.get_job("reminder:1") is not None  # type: ignore[union-attr]
        await cron(gw, action="pause", id=2)
        assert (await cron(gw, action="remove", id=1)).startswith("Removed task #1")
    assert [r["status"] for r in rows(workspace)] == ["removed", "paused"]
    assert fake_llm.requests == []


async def test_lucid_jobs_shows_tasks_and_paused_entries(make_config: Callable, workspace: Path,
                                                         tmp_path: Path) -> None:
    config = config_for(make_config)
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    task = store.add(session_key="cli:1", channel="cli", chat_id="1", thread_id=None, kind="cron",
                     spec="0 8 * * 1-5", text="Summarise my todos", created_at=now, purpose="task",
                     creator_id="local", creator_role="owner", chat_type="private")
    store.add(session_key="cli:1", channel="cli", chat_id="1", thread_id=None, kind="every",
              spec="3600", text="stretch", created_at=now)
    assert store.pause("cli:1", task.id)
    path = tmp_path / "config.json"
    path.write_text(config.model_dump_json(by_alias=True))
    result = CliRunner().invoke(build_app(), ["jobs", "--config", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "task (owner)" in result.output and "paused" in result.output
    assert "Summarise my todos" in result.output and "stretch" in result.output


async def test_a_missed_task_is_caught_up_once(fake_llm: FakeLLMServer, make_config: Callable,
                                               workspace: Path) -> None:
    """Down for three days over an hourly task: one catch-up run at start, not seventy."""
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    three_days_ago = datetime.now(UTC) - timedelta(days=3)
    store.add(session_key="cli:1", channel="cli", chat_id="1", thread_id=None, kind="every",
              spec="3600", text="Check the backup log", created_at=three_days_ago, purpose="task",
              creator_id="local", creator_role="owner", chat_type="private")
    fake_llm.default = lambda request: Reply("The backup ran fine.")
    async with running(config_for(make_config)) as (gw, ch, service):
        await ch.wait_replies(1, timeout=60)
        await gw.parts.agent.idle()
        job = service._scheduler.get_job("reminder:1")  # type: ignore[union-attr]
        assert job is not None and job.next_run_time > datetime.now(UTC)
    assert len(fake_llm.requests) == 1
    prompt = fake_llm.last_user_text(fake_llm.requests[0])
    assert "catch-up run" in prompt and "Check the backup log" in prompt
    assert rows(workspace)[0]["fire_count"] == 1
    assert "sender: local (owner)" in prompt and "exec" in tool_names(fake_llm.requests[0])


async def test_a_task_whose_creator_is_no_longer_an_owner_runs_as_a_guest(
        fake_llm: FakeLLMServer, make_config: Callable, workspace: Path) -> None:
    """The scheduler is the task's gate: it stamps the creator's role as configured when the
    task runs, and an owner's task set before they were removed from the owners gets no more."""
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    store.add(session_key="cli:1", channel="cli", chat_id="1", thread_id=None, kind="every",
              spec="3600", text="Check the backup log", created_at=datetime.now(UTC) - timedelta(hours=2),
              purpose="task", creator_id="local", creator_role="owner", chat_type="private")
    fake_llm.default = lambda request: Reply("Checked.")
    config = make_config(agents={"defaults": {"timezone": TZ, "llmRetries": 0}}, channels={"cli": {"owners": []}})
    async with running(config) as (gw, ch, _):
        await ch.wait_replies(1, timeout=60)
    [request] = fake_llm.requests
    assert "sender: local (guest)" in fake_llm.last_user_text(request)
    assert "exec" not in tool_names(request)


@pytest.mark.parametrize("arguments, message", [
    ({"action": "add", "every": 120}, "either 'text'"),
    ({"action": "add", "every": 120, "text": "a", "task": "b"}, "either 'text'"),
    ({"action": "add", "every": 120, "task": "x" * 2001}, "keep it under 2000"),
    ({"action": "pause"}, "pause needs the entry's 'id'"),
    ({"action": "resume", "id": 5}, "no paused reminder or task #5"),
])
async def test_bad_task_requests_get_clear_errors(make_config: Callable, workspace: Path,
                                                  arguments: dict[str, Any], message: str) -> None:
    async with running(config_for(make_config)) as (gw, _, _):
        result = await cron(gw, **arguments)
    assert result.startswith("Error: ") and message in result, result
