"""Reminders end to end: the cron tool -> SQLite -> APScheduler -> the bus -> the chat.

Real gateway (``build_gateway``), real AsyncIOScheduler, the fake LLM for the one test that
lets the model set a reminder; ``FakeChannel`` records what reaches the chat.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from lucidgate.channels.messages import InboundMessage
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.scheduler import ReminderStore, SchedulerService
from lucidgate.scheduler.reminder_jobs import MISSED_PREFIX, REMINDER_PREFIX
from lucidgate.scheduler.triggers import CrontabTrigger, parse_at
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Func, Reply, ToolCalls
from tests.waiting import until

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
                                               text="", message_id="m1",
                                               role="owner" if sender_id == "local" else "guest"))


async def cron(gw: Gateway, chat_id: str = "1", **arguments: Any) -> str:
    return await gw.parts.tools.execute(ctx_for(gw, chat_id), "cron", arguments)


def texts(channel: FakeChannel, chat_id: str | None = None) -> list[str]:
    return [m.text for m in channel.replies(chat_id)]  # type: ignore[union-attr]



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


def nothing_scheduled(service: Any) -> bool:
    """No reminder job is left in the scheduler: nothing can fire any more."""
    return "0 reminder(s) scheduled" in service.status_line()


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
        await until(lambda: len(texts(ch)) >= 1, timeout=30)
        await until(lambda: nothing_scheduled(service))  # fired and retired: it cannot fire again
        assert texts(ch) == ["⏰ Reminder: call mom"]
        assert ch.replies()[0].target.chat_id == "1"
    async with running(config) as (gw, ch, service):  # and never again
        assert nothing_scheduled(service) and texts(ch) == []
    [row] = rows(workspace)
    assert row["status"] == "done" and row["fire_count"] == 1


async def test_overdue_one_shot_within_grace_fires_once_on_start(config: Any, workspace: Path) -> None:
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    store.add(session_key="cli:1", channel="cli", chat_id="1", thread_id=None, kind="at",
              spec=(now - timedelta(minutes=10)).isoformat(), text="stretch", created_at=now - timedelta(hours=1))
    async with running(config) as (gw, ch, service):
        await until(lambda: len(texts(ch)) >= 1)
        await until(lambda: nothing_scheduled(service))
    assert texts(ch) == ["⏰ Reminder: stretch"]
    async with running(config) as (gw, ch, service):
        assert nothing_scheduled(service)  # loaded, and nothing left that could fire
    assert texts(ch) == []


async def test_one_shot_missed_beyond_grace_is_reported_not_lost_not_repeated(
    config: Any, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    store.add(session_key="cli:7", channel="cli", chat_id="7", thread_id=None, kind="at",
              spec=(now - timedelta(hours=3)).isoformat(), text="pay rent", created_at=now - timedelta(days=1))
    with caplog.at_level(logging.WARNING, logger="lucidgate.scheduler"):
        async with running(config) as (gw, ch, service):
            await until(lambda: len(texts(ch)) >= 1)
            await until(lambda: nothing_scheduled(service))
    [text] = texts(ch, "7")
    assert text.startswith(MISSED_PREFIX + "pay rent (it was due ")
    assert "missed" in caplog.text
    assert rows(workspace)[0]["status"] == "missed"
    async with running(config) as (gw, ch, service):
        assert nothing_scheduled(service)
    assert texts(ch) == []


async def test_a_sent_reminder_is_in_the_transcript_and_the_next_prompt(
    fake_llm: FakeLLMServer, config: Any, workspace: Path
) -> None:
    fake_llm.queue(Reply("You're welcome."))
    async with running(config) as (gw, ch, _):
        await cron(gw, action="add", at=local_iso(timedelta(seconds=1)), text="water the plants")
        await until(lambda: texts(ch, "1") == ["⏰ Reminder: water the plants"], timeout=30)
        await ch.say("thanks for the reminder", sender_id="local")
        await ch.wait_replies(2)
    messages = fake_llm.requests[-1]["messages"]
    reminded = [i for i, m in enumerate(messages) if m["role"] == "assistant"
                and m.get("content") == "⏰ Reminder: water the plants"]
    asked = [i for i, m in enumerate(messages) if m["role"] == "user"
             and str(m.get("content")).endswith("thanks for the reminder")]
    assert reminded and asked and reminded[0] < asked[0]
    lines = [json.loads(x) for x in (workspace / "sessions" / "cli_1.jsonl").read_text().splitlines()[1:]]
    assert {"role": "assistant", "content": "⏰ Reminder: water the plants", "kind": "reminder"}.items() \
        <= lines[0].items()


async def test_recurring_missed_run_is_reported_once_and_the_next_real_run_still_fires(
    config: Any, workspace: Path
) -> None:
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    now = datetime.now(UTC)
    store.add(session_key="cli:7", channel="cli", chat_id="7", thread_id=None, kind="every",
              spec="3600", text="stretch", created_at=now - timedelta(hours=5, minutes=30))
    async with running(config) as (gw, ch, service):
        await until(lambda: len(texts(ch, "7")) >= 1)
        assert texts(ch, "7")[0].startswith(MISSED_PREFIX + "stretch (it was due ")
        # The next real occurrence comes right after the missed report (within the 30 s that
        # tell one occurrence seen twice from a new one): it must fire, not be swallowed.
        job = service._scheduler.get_job("reminder:1")  # type: ignore[union-attr]
        assert job is not None and job.next_run_time > datetime.now(UTC)
        job.modify(next_run_time=datetime.now(UTC))
        service._scheduler.wakeup()  # type: ignore[union-attr]
        await until(lambda: len(texts(ch, "7")) >= 2)
    assert texts(ch, "7") == [texts(ch, "7")[0], "⏰ Reminder: stretch"]
    assert rows(workspace)[0]["fire_count"] == 2
    async with running(config) as (gw, ch, _):  # a restart reports nothing twice
        await gw.parts.bus.flush_outbound()
    assert texts(ch) == []


async def test_recurring_reminder_fires_each_period_once_and_stops_when_removed(
    config: Any, workspace: Path
) -> None:
    def allow_short(service: SchedulerService) -> None:
        service.reminders.min_every_s = 1  # the test setting that allows < 60 s

    async with running(config, setup=allow_short) as (gw, ch, _):
        result = await cron(gw, action="add", every=1, text="blink")
        assert result.startswith("Reminder #1 set (every 1 s): blink")
        await until(lambda: len(texts(ch)) >= 3, timeout=6)
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
        await until(lambda: len(texts(ch)) >= 1)
        # Fired, and the job has moved on to the next weekday: this occurrence is spent.
        await until(lambda: service._scheduler.get_job("reminder:1").next_run_time > datetime.now(UTC))  # type: ignore[union-attr]
        await gw.parts.bus.flush_outbound()
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
            await until(lambda: len(texts(ch)) >= 1)
            await until(lambda: nothing_scheduled(service))  # reported and retired
            await gw.parts.bus.flush_outbound()
    [text] = texts(ch)
    assert text.startswith(MISSED_PREFIX + "water plants")
    assert "missed its run time" in caplog.text
    assert rows(workspace)[0]["status"] == "missed"


# ----------------------------------------------------------------------------- isolation & faults


async def test_chats_see_and_remove_only_their_own_reminders(config: Any, workspace: Path) -> None:
    async with running(config) as (gw, ch, _):
        added = await cron(gw, "A", action="add", at=local_iso(timedelta(hours=2)), text="secret plan")
        assert added.startswith("Reminder #1 set")
        assert await cron(gw, "B", action="list") == "No reminders or tasks in this chat."
        refused = await cron(gw, "B", action="remove", id=1)
        assert refused.startswith("Error: there is no active or paused reminder or task #1 in this chat")
        listing = await cron(gw, "A", action="list")
        assert "#1 once at" in listing and "secret plan" in listing
        assert "Removed reminder #1" in await cron(gw, "A", action="remove", id=1)
        again = await cron(gw, "A", action="remove", id=1)
        assert again.startswith("Error: there is no active or paused reminder or task #1")
    assert rows(workspace)[0]["session_key"] == "cli:A"


@pytest.mark.parametrize(("arguments", "message"), [
    ({"action": "add", "cron": "61 * * * *", "text": "x"}, "invalid cron expression '61 * * * *'"),
    ({"action": "add", "cron": "* * * *", "text": "x"}, "4 field(s)"),
    ({"action": "add", "cron": "0 9 * * funday", "text": "x"}, "Bad day-of-week"),
    ({"action": "add", "cron": "0 0 31 2 *", "text": "x"}, "Bad day-of-month"),
    ({"action": "add", "at": "2020-01-01T09:00", "text": "x"}, "is in the past"),
    ({"action": "add", "at": "next tuesday", "text": "x"}, "is not an ISO 8601 time"),
    ({"action": "add", "every": 10, "text": "x"}, "shortest period is 60 seconds"),
    ({"action": "add", "every": 120, "at": "2099-01-01T00:00", "text": "x"}, "exactly one of"),
    ({"action": "add", "text": "x"}, "exactly one of"),
    ({"action": "add", "every": 120, "text": "  "}, "needs a text"),
    ({"action": "add", "every": 120, "text": "x" * 1001}, "keep it under 1000"),
    ({"action": "remove"}, "remove needs the entry's 'id'"),
    ({"action": "remove", "id": 99}, "no active or paused reminder or task #99"),
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
    with caplog.at_level(logging.INFO, logger="lucidgate.scheduler"):
        async with running(config) as (gw, ch, service):
            await until(lambda: "not running here; kept" in caplog.text)
            assert "0 reminder(s) scheduled" in service.status_line()
            await gw.parts.bus.flush_outbound()
    assert texts(ch) == []
    assert rows(workspace)[0]["status"] == "active"


async def test_a_claimed_reminder_is_never_delivered_twice(config: Any, workspace: Path) -> None:
    """Two firings of the same occurrence (a restart race, a second process): one message."""
    async with running(config) as (gw, ch, service):
        await cron(gw, action="add", at=local_iso(timedelta(hours=1)), text="once only")
        await asyncio.gather(service.reminders.fire(1), service.reminders.fire(1))
        await gw.parts.bus.flush_outbound()  # whatever the two firings sent has been delivered
        assert texts(ch) == ["⏰ Reminder: once only"]
        await service.reminders.report_missed(1)
        await gw.parts.bus.flush_outbound()
        assert texts(ch) == ["⏰ Reminder: once only"]


# ----------------------------------------------------------------------------- schedules & DST


def fire_times(expression: str, start: datetime, count: int) -> list[datetime]:
    """Fire times the way APScheduler asks for them: the previous fire time, a "now" just after."""
    trigger = CrontabTrigger(expression, ZoneInfo(TZ))
    fire = trigger.get_next_fire_time(None, start)
    seen = []
    for _ in range(count):
        assert fire is not None
        seen.append(fire)
        fire = trigger.get_next_fire_time(fire, fire + timedelta(milliseconds=500))
    return seen


def local(fires: list[datetime]) -> list[tuple[int, int, int]]:
    return [(f.astimezone(ZoneInfo(TZ)).day, f.astimezone(ZoneInfo(TZ)).hour, f.astimezone(ZoneInfo(TZ)).minute)
            for f in fires]


def test_crontab_semantics_weekdays_from_sunday_dom_or_weekday_last_and_nth() -> None:
    monday = datetime(2026, 11, 23, 12, tzinfo=ZoneInfo(TZ))  # a Monday
    weekdays = fire_times("0 9 * * 1-5", monday, 5)
    assert [f.strftime("%a") for f in weekdays] == ["Tue", "Wed", "Thu", "Fri", "Mon"]
    assert [f.strftime("%a") for f in fire_times("0 9 * * 0", monday, 2)] == ["Sun", "Sun"]
    assert fire_times("0 9 * * 7", monday, 1) == fire_times("0 9 * * 0", monday, 1)
    # Both day fields restricted: either one matches (the 1st of the month OR a Monday).
    either = fire_times("0 9 1 * 1", monday, 3)
    assert [(f.day, f.strftime("%a")) for f in either] == [(30, "Mon"), (1, "Tue"), (7, "Mon")]
    assert [f.day for f in fire_times("0 9 L * *", monday, 2)] == [30, 31]  # last day of the month
    assert [f.day for f in fire_times("0 9 * * MON#2", monday, 2)] == [14, 11]  # second Mondays


@pytest.mark.parametrize("expression", ["*/30 * * * *", "0 * * * *", "30 2 * * *", "15 * * * *"])
@pytest.mark.parametrize("start", [datetime(2026, 10, 24, 22, tzinfo=UTC),  # fall back (Berlin)
                                   datetime(2026, 3, 28, 22, tzinfo=UTC)])  # spring forward
def test_cron_fire_times_always_move_forward_across_dst(expression: str, start: datetime) -> None:
    seen = fire_times(expression, start, 40)
    instants = [f.timestamp() for f in seen]
    assert instants == sorted(set(instants))  # strictly increasing: no repeat, no loop
    assert seen[0].timestamp() >= start.timestamp()  # never before "now"


def test_the_repeated_autumn_hour() -> None:
    night = datetime(2026, 10, 25, 0, 45, tzinfo=ZoneInfo(TZ))  # 02:00-03:00 happens twice
    # A fixed time fires once, in the first pass.
    assert local(fire_times("30 2 * * *", night, 2)) == [(25, 2, 30), (26, 2, 30)]
    # A wildcard hour keeps its real-time rhythm: both passes, every 30 real minutes.
    every = fire_times("*/30 * * * *", night, 6)
    assert local(every) == [(25, 1, 0), (25, 1, 30), (25, 2, 0), (25, 2, 30), (25, 2, 0), (25, 2, 30)]
    assert {round(b.timestamp() - a.timestamp()) for a, b in zip(every, every[1:])} == {1800}


def test_the_skipped_spring_hour() -> None:
    evening = datetime(2026, 3, 28, 12, tzinfo=ZoneInfo(TZ))  # 02:00-03:00 does not exist on the 29th
    assert local(fire_times("30 2 * * *", evening, 2)) == [(29, 3, 0), (30, 2, 30)]  # right after the jump
    hourly = local(fire_times("0 * * * *", datetime(2026, 3, 29, 0, 30, tzinfo=ZoneInfo(TZ)), 3))
    assert hourly == [(29, 1, 0), (29, 3, 0), (29, 4, 0)]


def test_the_next_fire_time_is_never_before_now() -> None:
    trigger = CrontabTrigger("0 9 * * *", ZoneInfo(TZ))
    exactly = datetime(2026, 11, 24, 9, 0, tzinfo=ZoneInfo(TZ))
    assert trigger.get_next_fire_time(None, exactly) == exactly  # "now" itself is not skipped
    later = exactly + timedelta(seconds=1)
    nxt = trigger.get_next_fire_time(None, later)
    assert nxt is not None and nxt > later and (nxt.day, nxt.hour) == (25, 9)
    # With a previous fire time long ago (a restart), the trigger moves forward from it; the
    # scheduler's misfire handling decides about the past, never a time before the previous one.
    assert trigger.get_next_fire_time(exactly, later) == nxt


def test_naive_times_are_read_in_the_configured_timezone() -> None:
    tz = ZoneInfo(TZ)
    now = datetime(2026, 7, 1, 8, tzinfo=UTC)
    when = parse_at("2026-07-01T12:00", tz, now)
    assert when.utcoffset() == timedelta(hours=2) and when.astimezone(UTC).hour == 10
    assert parse_at("2026-07-01T12:00Z", tz, now).astimezone(UTC).hour == 12
    gap = parse_at("2026-03-29T02:30", tz, datetime(2026, 3, 1, tzinfo=UTC))
    assert (gap.hour, gap.minute) == (3, 30)  # inside the DST gap: moved past it, still valid
