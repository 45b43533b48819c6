"""The scheduler service: the Dream job on a real AsyncIOScheduler, misfires, `lucid jobs`.

Intervals are shrunk (``intervalH: 0.0005`` is 1.8 s) instead of mocking time, and every
LLM call goes through litellm to the loopback fake, so "no LLM call" is counted, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import lucidgate.scheduler.service as scheduler_service
from lucidgate.channels.messages import InboundMessage
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.cli import build_app
from lucidgate.scheduler import SchedulerService
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import Fail, FakeLLMServer, Hang, Reply
from tests.waiting import until

OWNER = {"sender_id": "local"}
FAST = 0.0005  # intervalH: one Dream every 1.8 s


@asynccontextmanager
async def running(config: Any, *, history: list[str] = ()  # type: ignore[assignment]
                  ) -> AsyncIterator[tuple[Gateway, FakeChannel, SchedulerService]]:
    gw = build_gateway(config)
    for line in history:
        await gw.parts.store.append_history(line, session_key="cli:1")
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    service = gw.parts.scheduler
    async with gw:
        yield gw, channel, service


def dream_config(make_config: Callable, **dream: Any) -> Any:
    return make_config(agents={"defaults": {"llmRetries": 0, "dream": dream}})


def job_state(workspace: Path, job: str = "dream") -> dict[str, Any]:
    path = workspace / "state" / "scheduler.json"
    return json.loads(path.read_text())["jobs"].get(job, {}) if path.exists() else {}



# ----------------------------------------------------------------------------- Dream job


async def test_dream_runs_on_schedule_and_then_skips_without_llm_calls(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.queue(Reply("[SKIP]"))
    async with running(dream_config(make_config, intervalH=FAST),
                       history=["- Ana drinks tea", "- Ana lives in Porto"]) as (gw, ch, service):
        assert service.next_dream() is not None
        await fake_llm.wait_for_requests(1, timeout=60)
        await until(lambda: "entries #1–#2" in job_state(workspace).get("last_result", ""))
        assert gw.parts.store.dream_cursor() == 2
        first_run = job_state(workspace)["last_run"]
        # The following runs find nothing after .dream_cursor: they run, cheaply.
        await until(lambda: job_state(workspace).get("last_run") != first_run)
        assert job_state(workspace)["last_result"] == "Dream: nothing new to process."
        await ch.say("/status", **OWNER)
        [status] = await ch.wait_replies(1)
    assert len(fake_llm.requests) == 1
    assert "scheduler: next Dream " in status.text  # type: ignore[union-attr]
    assert datetime.fromisoformat(job_state(workspace)["next_run"]) > datetime.fromisoformat(first_run)


async def test_scheduled_dream_and_dream_command_never_run_together(
    fake_llm: FakeLLMServer, make_config: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.queue(Hang(3.0))  # the scheduled run's phase 1 is slow; ticks keep coming meanwhile
    with caplog.at_level(logging.INFO):
        async with running(dream_config(make_config, intervalH=FAST),
                           history=["- Ana drinks tea"]) as (gw, ch, _):
            await fake_llm.wait_for_requests(1, timeout=60)
            assert gw.parts.dream.running
            await ch.say("/dream", **OWNER)
            [reply] = await ch.wait_replies(1)
            assert reply.text == "Dream is already running; try again in a minute."  # type: ignore[union-attr]
            await until(lambda: not gw.parts.dream.running)
            await asyncio.sleep(0.5)
    assert len(fake_llm.requests) == 1  # one run; the overlapping ticks were skipped, not queued
    assert "skipped a run: the previous run is still going" in caplog.text


async def test_scheduled_dream_logs_already_running_while_dream_command_runs(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.queue(Hang(3.0), Reply("[SKIP]"))
    with caplog.at_level(logging.INFO, logger="lucidgate.scheduler"):
        async with running(dream_config(make_config, intervalH=FAST),
                           history=["- Ana drinks tea"]) as (gw, ch, _):
            await ch.say("/dream", **OWNER)  # starts before the first tick (1.8 s)
            await fake_llm.wait_for_requests(1, timeout=60)
            await until(lambda: job_state(workspace).get("last_result") == "skipped: already running")
            [reply] = await ch.wait_replies(1, timeout=60)
    assert reply.text.startswith("Dream: entries #1–#1")  # type: ignore[union-attr]
    assert len(fake_llm.requests) == 1
    assert "scheduled Dream skipped: a Dream is already running" in caplog.text


async def test_an_overdue_dream_runs_soon_after_start(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    (workspace / "state").mkdir()
    (workspace / "state" / "scheduler.json").write_text(json.dumps({"v": 1, "jobs": {"dream": {
        "last_run": (now - timedelta(hours=3)).isoformat(),
        "next_run": (now - timedelta(hours=1)).isoformat()}}}))
    monkeypatch.setattr(scheduler_service, "STARTUP_DELAY_S", 0.3)
    fake_llm.queue(Reply("[SKIP]"))
    started = datetime.now(UTC)
    async with running(dream_config(make_config, intervalH=2), history=["- Ana drinks tea"]) as (gw, _, svc):
        entered = datetime.now(UTC)
        await fake_llm.wait_for_requests(1, timeout=60)  # it ran: not two hours from now
        await until(lambda: gw.parts.store.dream_cursor() == 1)
        await until(lambda: "entries #1–#1" in job_state(workspace).get("last_result", ""))
        following = svc.next_dream()
    # The overdue run was due STARTUP_DELAY_S after the scheduler started (between ``started``
    # and ``entered``), and the next one an interval after it; bounds that hold however slowly
    # the gateway started, without reading the schedule before the run (a race).
    assert following is not None
    assert started + timedelta(hours=2) <= following <= entered + timedelta(hours=2, seconds=0.3)


async def test_overdue_dream_waits_at_most_a_minute_by_default(make_config: Callable, workspace: Path) -> None:
    (workspace / "state").mkdir()
    (workspace / "state" / "scheduler.json").write_text(json.dumps({"v": 1, "jobs": {"dream": {
        "last_run": (datetime.now(UTC) - timedelta(days=2)).isoformat()}}}))
    before = datetime.now(UTC)
    async with running(dream_config(make_config, intervalH=6)) as (_, _, svc):
        entered = datetime.now(UTC)
        due = svc.next_dream()
    # A minute after the scheduler started (between ``before`` and ``entered``), however slow
    # the start was: not the six-hour interval, and not at once.
    minute = timedelta(seconds=scheduler_service.STARTUP_DELAY_S)
    assert scheduler_service.STARTUP_DELAY_S == 60.0
    assert due is not None and before + minute <= due <= entered + minute


async def test_restarting_more_often_than_the_interval_keeps_the_schedule(
    make_config: Callable, workspace: Path
) -> None:
    config = dream_config(make_config, intervalH=1)
    async with running(config) as (_, _, svc):
        planned = svc.next_dream()
    assert planned is not None and timedelta(minutes=59) < planned - datetime.now(UTC) <= timedelta(hours=1)
    await asyncio.sleep(0.2)
    async with running(config) as (_, _, svc):
        assert svc.next_dream() == planned  # not pushed back by the restart
    async with running(dream_config(make_config, intervalH=0.25)) as (_, _, svc):
        shorter = svc.next_dream()  # a shorter interval applies from the last run / now
    assert shorter is not None and shorter < planned


async def test_dream_can_be_switched_off(make_config: Callable) -> None:
    async with running(dream_config(make_config, enabled=False)) as (gw, ch, svc):
        assert svc.next_dream() is None
        assert "scheduled Dream off" in svc.status_line()
        assert "heartbeat off" in svc.status_line()


async def test_a_slow_dream_never_delays_a_reminder(
    fake_llm: FakeLLMServer, make_config: Callable
) -> None:
    fake_llm.queue(Hang(3.0))
    async with running(dream_config(make_config, intervalH=FAST), history=["- x"]) as (gw, ch, svc):
        await fake_llm.wait_for_requests(1, timeout=60)
        at = (datetime.now(UTC) + timedelta(seconds=0.5)).isoformat()
        ctx = gw.parts.agent.context_for(InboundMessage(
            channel="cli", chat_id="1", sender_id="local", text="", role="owner"))
        assert (await gw.parts.tools.execute(ctx, "cron", {"action": "add", "at": at, "text": "tea"})).startswith("Reminder")
        await ch.wait_replies(1, timeout=60)
        assert gw.parts.dream.running  # the reminder came while the Dream was still thinking
        assert ch.replies()[0].text == "⏰ Reminder: tea"  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- listeners & faults


async def test_a_failing_llm_inside_a_scheduled_dream_is_recorded_and_the_schedule_goes_on(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.default = lambda body: Fail(500, "upstream exploded")  # every run fails
    async with running(dream_config(make_config, intervalH=FAST), history=["- x"]) as (gw, _, svc):
        await until(lambda: "(error:" in job_state(workspace).get("last_result", ""))
        assert gw.parts.store.dream_cursor() == 0  # the entry stays for the next run
        assert svc.running and svc.next_dream() is not None


async def test_a_damaged_reminders_file_does_not_stop_the_scheduler(
    make_config: Callable, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (workspace / "state").mkdir()
    (workspace / "state" / "reminders.sqlite").write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.ERROR, logger="lucidgate.scheduler"):
        async with running(make_config()) as (gw, _, svc):
            assert svc.running and svc.next_dream() is not None
            ctx = gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="", role="owner"))
            result = await gw.parts.tools.execute(ctx, "cron", {"action": "list"})
    assert "could not load reminders" in caplog.text
    assert result.startswith("Error: cron failed: DatabaseError")


async def test_missed_and_failing_jobs_are_logged_not_silent(
    make_config: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    async def boom() -> None:
        raise RuntimeError("kaboom")

    async def late() -> None:
        ran.append("late")

    with caplog.at_level(logging.WARNING):
        async with running(make_config()) as (_, _, svc):
            sched = svc._scheduler
            assert sched is not None
            sched.add_job(boom, "date", run_date=datetime.now(UTC), id="boom")
            sched.add_job(late, "date", run_date=datetime.now(UTC) - timedelta(minutes=5), id="late",
                          misfire_grace_time=1)
            await until(lambda: "scheduled job boom failed" in caplog.text
                           and "scheduled job late missed its run time" in caplog.text, timeout=60)
            assert svc.running
    assert ran == []


async def test_a_bad_timezone_is_a_clear_error(make_config: Callable) -> None:
    from lucidgate.config.errors import LucidError

    config = make_config()
    config.agents.defaults.timezone = "Mars/Olympus"
    with pytest.raises(LucidError, match="unknown timezone 'Mars/Olympus'"):
        scheduler_service.scheduler_timezone(config)  # what the root asks before it builds the jobs


async def test_terminal_agent_runs_no_dream_or_heartbeat(make_config: Callable) -> None:
    config = make_config(agents={"defaults": {"heartbeat": {"enabled": True}}})
    gw = build_gateway(config, "agent")
    svc = gw.parts.scheduler
    async with gw:
        assert svc.running and svc.next_dream() is None
        assert not gw.parts.bus.has_route("heartbeat")
    assert not svc.running


# ----------------------------------------------------------------------------- lucid jobs


async def test_lucid_jobs_lists_jobs_and_reminders(fake_llm: FakeLLMServer, make_config: Callable,
                                                    workspace: Path, tmp_path: Path) -> None:
    fake_llm.queue(Reply("[SKIP]"))
    async with running(dream_config(make_config, intervalH=FAST), history=["- x"]) as (gw, ch, svc):
        ctx = gw.parts.agent.context_for(InboundMessage(
            channel="cli", chat_id="9", sender_id="local", text="", role="owner"))
        await gw.parts.tools.execute(ctx, "cron", {"action": "add", "cron": "0 8 * * *", "text": "vitamins"})
        await until(lambda: "entries #1" in job_state(workspace).get("last_result", ""))
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    result = await asyncio.to_thread(CliRunner().invoke, build_app(), ["jobs", "--config", str(config_file)],
                                    env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "dream" in result.output and "entries #1" in result.output
    assert "vitamins" in result.output and "cli:9" in result.output and "active" in result.output
    assert "08:00" in result.output  # the reminder's next run, computed from SQLite alone
