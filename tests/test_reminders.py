"""Reminders end to end: the cron tool -> SQLite -> APScheduler -> the bus -> the chat.

Real gateway (``build_gateway``), real AsyncIOScheduler, the fake LLM for the one test that
lets the model set a reminder; ``FakeChannel`` records what reaches the chat.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from channels.messages import InboundMessage
from gateway.app import Gateway, build_gateway
from gateway.turn import TurnContext
from scheduler import ReminderStore, SchedulerService
from scheduler.reminder_jobs import MISSED_PREFIX, REMINDER_PREFIX
from scheduler.triggers import WallClockCronTrigger, crontab_weekdays, parse_at
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Func, Reply, ToolCalls

TZ = "Europe/Berlin"


@asynccontextmanager
async def running(config: Any, *, setup: Callable[[SchedulerService], None] | None = None,
                  ) -> AsyncIterator[tuple[Gateway, FakeChannel, SchedulerService]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    service = gw.parts.scheduler
    if setup is not None:
        setup(service)
    async with gw:
        yield gw, channel, service


def ctx_for(gw: Gateway, chat_id: str = "1", sender_id: str = "local") -> TurnContext:
    return gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id=chat_id, sender_id=sender_id,
                                               text="", message_id="m1"))


async def cron(gw: Gateway, chat_id: str = "1", **arguments: Any) -> str:
    return await gw.parts.tools.execute(ctx_for(gw, chat_id), "cron", arguments)


def texts(channel: FakeChannel, chat_id: str | None = None) -> list[str]:
    return [m.text for m in channel.replies(chat_id)]  # type: ignore[union-attr]


async def wait_for(predicate: Callable[[], bool], timeout: float = 8.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


def local_iso(delta: timedelta, tz: str = TZ) -> str:
    """A naive ISO time ``delta`` from now, on the configured timezone's wall clock."""
    return (datetime.now(ZoneInfo(tz)) + delta).replace(tzinfo=None).isoformat(timespec="milliseconds")


def rows(workspace: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(workspace / "state" / "reminders.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM reminders ORDER BY id")]
    finally:
        conn.close()


@pytest.fixture
def config(make_config: Callable) -> Any:
    return make_config(agents={"defaults": {"timezone": TZ, "llmRetries": 0}})


# ----------------------------------------------------------------------------- happy paths


async def test_model_sets_a_reminder_that_survives_a_restart_and_fires_once(
    fake_llm: FakeLLMServer, config: Any, workspace: Path
) -> None:
    def set_reminder(_request: dict[str, Any]) -> ToolCalls:  # "in two seconds", said when asked
        at = local_iso(timedelta(seconds=2))
        return ToolCalls([("cron", {"action": "add", "at": at, "text": "call mom"})])

    fake_llm.queue(Func(set_reminder), Reply("I'll remind you."))
    async with running(config) as (gw, ch, _):
        await ch.say("remind me to call mom in a moment", sender_id="local")
        await ch.wait_replies(1)
    tool_result = next(m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool")["content"]
    assert tool_result.startswith("Reminder #1 set (once at ")
    assert "CE" in tool_result  # shown in the configured timezone (CET/CEST)
    assert not any(t.startswith(REMINDER_PREFIX) for t in texts(ch))  # not due before the restart

    async with running(config) as (gw, ch, service):  # a new gateway on the same workspace
        assert service.status_line().count("1 reminder(s) scheduled") == 1
        await wait_for(lambda: len(texts(ch)) >= 1, timeout=6)
        await asyncio.sleep(0.5)
        assert texts(ch) == ["⏰ Reminder: call mom"]
        assert ch.replies()[0].target.chat_id == "1"
    async with running(config) as (gw, ch, _):  # and never again
        await asyncio.sleep(0.3)
        assert texts(ch) == []
    [row] = rows(workspace)
    assert row["status"] == "done" and row["fire_count"] == 1


async def test_overdue_one_shot_within_grace_fires_once_on_start(config: Any, workspace: Path) -> None:
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    store.add(session_key="cli:1", channel="cli", chat_id="1", thread_id=None, kind="at",
              spec=(now - timedelta(minutes=10)).isoformat(), text="stretch", created_at=now - timedelta(hours=1))
    async with running(config) as (gw, ch, _):
        await wait_for(lambda: len(texts(ch)) >= 1)
        await asyncio.sleep(0.2)
    assert texts(ch) == ["⏰ Reminder: stretch"]
    async with running(config) as (gw, ch, _):
        await asyncio.sleep(0.3)
    assert texts(ch) == []


async def test_one_shot_missed_beyond_grace_is_reported_not_lost_not_repeated(
    config: Any, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    store.add(session_key="cli:7", channel="cli", chat_id="7", thread_id=None, kind="at",
              spec=(now - timedelta(hours=3)).isoformat(), text="pay rent", created_at=now - timedelta(days=1))
    with caplog.at_level(logging.WARNING, logger="scheduler"):
        async with running(config) as (gw, ch, _):
            await wait_for(lambda: len(texts(ch)) >= 1)
            await asyncio.sleep(0.2)
    [text] = texts(ch, "7")
    assert text.startswith(MISSED_PREFIX + "pay rent (it was due ")
    assert "missed" in caplog.text
    assert rows(workspace)[0]["status"] == "missed"
    async with running(config) as (gw, ch, _):
        await asyncio.sleep(0.3)
    assert texts(ch) == []


async def test_recurring_reminder_fires_each_period_once_and_stops_when_removed(
    config: Any, workspace: Path
) -> None:
    def allow_short(service: SchedulerService) -> None:
        service.reminders.min_every_s = 1  # the test setting that allows < 60 s

    async with running(config, setup=allow_short) as (gw, ch, _):
        result = await cron(gw, action="add", every=1, text="blink")
        assert result.startswith("Reminder #1 set (every 1 s): blink")
        await wait_for(lambda: len(texts(ch)) >= 3, timeout=6)
        assert set(texts(ch)) == {"⏰ Reminder: blink"}
        assert "Removed reminder #1: blink" == await cron(gw, action="remove", id=1)
        count = len(texts(ch))
        await asyncio.sleep(1.5)
        assert len(texts(ch)) == count
    [row] = rows(workspace)
    assert row["status"] == "removed" and row["fire_count"] == count


async def test_cron_reminder_uses_the_configured_timezone_and_fires_once_per_occurrence(
    config: Any, workspace: Path
) -> None:
    async with running(config) as (gw, ch, service):
        result = await cron(gw, action="add", cron="30 9 * * 1-5", text="standup")
        assert "cron '30 9 * * 1-5' (Europe/Berlin)" in result
        job = service._scheduler.get_job("reminder:1")  # type: ignore[union-attr]
        first = job.next_run_time.astimezone(ZoneInfo(TZ))
        assert (first.hour, first.minute) == (9, 30) and first.isoweekday() <= 5  # Mon–Fri, crontab style
        # Bring the occurrence forward to now: it fires once and moves on to the next weekday.
        job.modify(next_run_time=datetime.now(UTC))
        service._scheduler.wakeup()  # type: ignore[union-attr]
        await wait_for(lambda: len(texts(ch)) >= 1)
        await asyncio.sleep(0.3)
        assert texts(ch) == ["⏰ Reminder: standup"]
        later = service._scheduler.get_job("reminder:1").next_run_time  # type: ignore[union-attr]
        assert later > datetime.now(UTC) and later.astimezone(ZoneInfo(TZ)).hour == 9
    assert rows(workspace)[0]["fire_count"] == 1


async def test_a_reminder_missed_at_runtime_is_reported_through_the_listener(
    config: Any, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def short_grace(service: SchedulerService) -> None:
        service.reminders.grace_s = 1

    with caplog.at_level(logging.WARNING):
        async with running(config, setup=short_grace) as (gw, ch, service):
            await cron(gw, action="add", at=local_iso(timedelta(hours=1)), text="water plants")
            # As if the machine slept through the run time: APScheduler sees a misfire.
            service._scheduler.get_job("reminder:1").modify(  # type: ignore[union-attr]
                next_run_time=datetime.now(UTC) - timedelta(seconds=30))
            service._scheduler.wakeup()  # type: ignore[union-attr]
            await wait_for(lambda: len(texts(ch)) >= 1)
            await asyncio.sleep(0.2)
    [text] = texts(ch)
    assert text.startswith(MISSED_PREFIX + "water plants")
    assert "missed its run time" in caplog.text
    assert rows(workspace)[0]["status"] == "missed"


# ----------------------------------------------------------------------------- isolation & faults


async def test_chats_see_and_remove_only_their_own_reminders(config: Any, workspace: Path) -> None:
    async with running(config) as (gw, ch, _):
        added = await cron(gw, "A", action="add", at=local_iso(timedelta(hours=2)), text="secret plan")
        assert added.startswith("Reminder #1 set")
        assert await cron(gw, "B", action="list") == "No reminders in this chat."
        refused = await cron(gw, "B", action="remove", id=1)
        assert refused.startswith("Error: there is no active reminder #1 in this chat")
        listing = await cron(gw, "A", action="list")
        assert "#1 once at" in listing and "secret plan" in listing
        assert "Removed reminder #1" in await cron(gw, "A", action="remove", id=1)
        again = await cron(gw, "A", action="remove", id=1)
        assert again.startswith("Error: there is no active reminder #1")
    assert rows(workspace)[0]["session_key"] == "cli:A"


@pytest.mark.parametrize(("arguments", "message"), [
    ({"action": "add", "cron": "61 * * * *", "text": "x"}, "invalid cron expression '61 * * * *'"),
    ({"action": "add", "cron": "* * * *", "text": "x"}, "4 field(s)"),
    ({"action": "add", "cron": "0 9 * * funday", "text": "x"}, "not a weekday"),
    ({"action": "add", "cron": "0 9 1 * 1", "text": "x"}, "restricts both"),
    ({"action": "add", "cron": "0 0 31 2 *", "text": "x"}, "never fires"),
    ({"action": "add", "at": "2020-01-01T09:00", "text": "x"}, "is in the past"),
    ({"action": "add", "at": "next tuesday", "text": "x"}, "is not an ISO 8601 time"),
    ({"action": "add", "every": 10, "text": "x"}, "shortest period is 60 seconds"),
    ({"action": "add", "every": 120, "at": "2099-01-01T00:00", "text": "x"}, "exactly one of"),
    ({"action": "add", "text": "x"}, "exactly one of"),
    ({"action": "add", "every": 120, "text": "  "}, "needs a text"),
    ({"action": "add", "every": 120, "text": "x" * 1001}, "keep it under 1000"),
    ({"action": "remove"}, "needs the reminder's 'id'"),
    ({"action": "remove", "id": 99}, "no active reminder #99"),
    ({"action": "snooze"}, "invalid arguments for cron"),
])
async def test_invalid_requests_get_clear_errors_and_store_nothing(
    config: Any, workspace: Path, arguments: dict[str, Any], message: str
) -> None:
    async with running(config) as (gw, ch, service):
        result = await cron(gw, **arguments)
        assert result.startswith("Error: ") and message in result, result
        assert service.running  # the scheduler is unharmed
    assert not (workspace / "state" / "reminders.sqlite").exists() or rows(workspace) == []


async def test_reminder_for_a_channel_not_running_is_kept(
    config: Any, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    store.add(session_key="telegram:5", channel="telegram", chat_id="5", thread_id=None, kind="at",
              spec=(now - timedelta(minutes=1)).isoformat(), text="feed cat", created_at=now - timedelta(hours=1))
    with caplog.at_level(logging.INFO, logger="scheduler"):
        async with running(config) as (gw, ch, service):
            await asyncio.sleep(0.3)
            assert "0 reminder(s) scheduled" in service.status_line()
    assert "not running here; kept" in caplog.text
    assert texts(ch) == []
    assert rows(workspace)[0]["status"] == "active"


async def test_a_claimed_reminder_is_never_delivered_twice(config: Any, workspace: Path) -> None:
    """Two firings of the same occurrence (a restart race, a second process): one message."""
    async with running(config) as (gw, ch, service):
        await cron(gw, action="add", at=local_iso(timedelta(hours=1)), text="once only")
        await asyncio.gather(service.reminders.fire(1), service.reminders.fire(1))
        await asyncio.sleep(0.2)
        assert texts(ch) == ["⏰ Reminder: once only"]
        await service.reminders.report_missed(1)
        await asyncio.sleep(0.1)
        assert texts(ch) == ["⏰ Reminder: once only"]


# ----------------------------------------------------------------------------- schedules & DST


def test_crontab_weekdays_count_from_sunday() -> None:
    assert crontab_weekdays("1-5") == "mon,tue,wed,thu,fri"
    assert crontab_weekdays("0") == crontab_weekdays("7") == "sun"
    assert crontab_weekdays("sat,sun") == "sun,sat"
    assert crontab_weekdays("*/2") == "sun,tue,thu,sat"
    assert crontab_weekdays("0-6") == "*"
    with pytest.raises(ValueError):
        crontab_weekdays("5-1")


@pytest.mark.parametrize("expression", ["*/30 * * * *", "0 * * * *", "30 2 * * *", "15 * * * *"])
@pytest.mark.parametrize("start", [datetime(2026, 10, 24, 22, tzinfo=UTC),  # fall back (Berlin)
                                   datetime(2026, 3, 28, 22, tzinfo=UTC)])  # spring forward
def test_cron_fire_times_always_move_forward_across_dst(expression: str, start: datetime) -> None:
    tz = ZoneInfo(TZ)
    trigger = WallClockCronTrigger(expression, tz)
    fire = trigger.get_next_fire_time(None, start)
    seen = []
    for _ in range(40):  # the way APScheduler calls it: previous fire time, a "now" just after
        assert fire is not None
        seen.append(fire)
        fire = trigger.get_next_fire_time(fire, fire + timedelta(milliseconds=500))
    instants = [f.timestamp() for f in seen]
    assert instants == sorted(set(instants))  # strictly increasing: no repeat, no loop
    walls = [f.astimezone(tz).replace(tzinfo=None) for f in seen]
    assert len(walls) == len(set(walls))  # a wall-clock time that happens twice fires once


def test_daily_cron_on_dst_days() -> None:
    tz = ZoneInfo(TZ)
    trigger = WallClockCronTrigger("30 2 * * *", tz)
    fall = trigger.get_next_fire_time(None, datetime(2026, 10, 24, 12, tzinfo=tz))
    after = trigger.get_next_fire_time(fall, fall)
    assert (fall.day, fall.hour) == (25, 2) and (after.day, after.hour) == (26, 2)  # once, not twice
    spring = trigger.get_next_fire_time(None, datetime(2026, 3, 28, 12, tzinfo=tz))
    assert (spring.day, spring.hour, spring.minute) == (29, 3, 30)  # 02:30 does not exist: right after


def test_naive_times_are_read_in_the_configured_timezone() -> None:
    tz = ZoneInfo(TZ)
    now = datetime(2026, 7, 1, 8, tzinfo=UTC)
    when = parse_at("2026-07-01T12:00", tz, now)
    assert when.utcoffset() == timedelta(hours=2) and when.astimezone(UTC).hour == 10
    assert parse_at("2026-07-01T12:00Z", tz, now).astimezone(UTC).hour == 12
    gap = parse_at("2026-03-29T02:30", tz, datetime(2026, 3, 1, tzinfo=UTC))
    assert (gap.hour, gap.minute) == (3, 30)  # inside the DST gap: moved past it, still valid
