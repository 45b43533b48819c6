"""Reminder schedules: parsing what the user asked for, and DST-safe APScheduler triggers.

Three kinds, stored as ``(kind, spec)`` text in SQLite so a restart can rebuild the trigger:

* ``at``    — one ISO 8601 time; a naive time means the configured timezone.
* ``every`` — a period in seconds, on a grid anchored at creation (restarts don't drift it).
* ``cron``  — a standard 5-field crontab expression in the configured timezone.

Cron expressions are evaluated by ``cronsim``, which follows Debian's cron: 0 (and 7) is
Sunday, a day-of-month and a weekday both restricted means either matches, and ``L`` (last
day of the month) and ``MON#2`` (second Monday) work. ``CrontabTrigger`` wraps it for
APScheduler, whose own ``CronTrigger`` numbers weekdays from Monday and can return the same
or an earlier time across a DST fall-back (agronholm/apscheduler#1021). Around DST:

* the repeated autumn hour: a job at a fixed time (``30 2 * * *``) fires once, in the
  first pass; a job whose hour is a wildcard (``*/30 * * * *``) keeps its real-time rhythm
  and fires in both passes;
* the skipped spring hour: a job whose time does not exist that day fires right after the
  jump (``30 2 * * *`` fires at 03:00).

Fire times only move forward: never at or before the previous one, never before "now".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from cronsim import CronSim, CronSimError

from lucidgate.scheduler.errors import ReminderError

Kind = Literal["at", "every", "cron"]

MAX_AHEAD = timedelta(days=3660)  # ten years: further is almost surely a typo
MAX_EVERY_S = 366 * 24 * 3600
_MAX_STEPS = 1000  # bound on candidates examined for one fire time
_CRON_HELP = ("use 5 fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5' "
              "for 09:00 on weekdays")


def parse_at(text: str, tz: tzinfo, now: datetime) -> datetime:
    """An ISO 8601 time in the future, as an aware datetime in ``tz``."""
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ReminderError(
            f"{raw!r} is not an ISO 8601 time; use e.g. 2026-04-03T09:00 (read in {tz}) "
            "or 2026-04-03T07:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    when = normalize(when, tz)
    if when <= now:
        raise ReminderError(f"{format_time(when, tz)} is in the past (it is now "
                            f"{format_time(now, tz)}); give a future time")
    if when - now > MAX_AHEAD:
        raise ReminderError(f"{format_time(when, tz)} is more than ten years ahead; give a nearer time")
    return when


def check_every(seconds: int, minimum_s: int) -> int:
    if seconds < minimum_s:
        raise ReminderError(f"every={seconds} is too often; the shortest period is {minimum_s} seconds")
    if seconds > MAX_EVERY_S:
        raise ReminderError(f"every={seconds} is longer than a year; use a cron expression or 'at'")
    return seconds


def normalize(when: datetime, tz: tzinfo) -> datetime:
    """The same instant as a real local time in ``tz`` (a time inside a DST gap moves past it)."""
    return datetime.fromtimestamp(when.timestamp(), tz)


def format_time(when: datetime, tz: tzinfo) -> str:
    return when.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z").strip()


def describe(kind: str, spec: str, tz: tzinfo) -> str:
    if kind == "at":
        return f"once at {format_time(datetime.fromisoformat(spec), tz)}"
    if kind == "every":
        return f"every {_duration(int(spec))}"
    return f"cron '{spec}' ({tz})"


def _duration(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            amount, seconds = divmod(seconds, size)
            parts.append(f"{amount} {unit}")
    return " ".join(parts) or "0 s"


def build_trigger(kind: str, spec: str, tz: tzinfo, created_at: datetime) -> BaseTrigger:
    """The APScheduler trigger for a stored reminder (raises ``ReminderError`` if invalid)."""
    if kind == "at":
        return DateTrigger(run_date=datetime.fromisoformat(spec), timezone=tz)
    if kind == "every":
        period = timedelta(seconds=int(spec))
        # Absolute time (UTC) so DST never stretches or shrinks a period.
        return IntervalTrigger(seconds=int(spec), start_date=created_at + period, timezone=UTC)
    if kind == "cron":
        return CrontabTrigger(spec, tz)
    raise ReminderError(f"unknown reminder kind {kind!r}")


class CrontabTrigger(BaseTrigger):
    """A crontab expression in ``tz``, evaluated by cronsim; fire times only move forward."""

    __slots__ = ("expression", "timezone")

    def __init__(self, expression: str, tz: tzinfo) -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise ReminderError(f"invalid cron expression {expression!r}: {len(fields)} field(s); {_CRON_HELP}")
        self.expression = " ".join(fields)
        self.timezone = tz
        try:
            CronSim(self.expression, datetime.now(tz))
        except CronSimError as exc:
            raise ReminderError(f"invalid cron expression {expression!r}: {exc}; {_CRON_HELP}") from None
        if self.get_next_fire_time(None, datetime.now(UTC)) is None:
            raise ReminderError(f"cron expression {expression!r} never fires (no such date)")

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        """The first fire time after ``previous_fire_time`` (or at/after ``now`` without one)."""
        if previous_fire_time is not None:
            after = previous_fire_time.timestamp()
            start = previous_fire_time.astimezone(self.timezone)
        else:
            # cronsim yields times strictly after its start; a microsecond back keeps "now" itself.
            after = now.timestamp() - 1e-6
            start = now.astimezone(self.timezone) - timedelta(microseconds=1)
        candidates = CronSim(self.expression, start)
        for _ in range(_MAX_STEPS):
            try:
                fire = next(candidates)
            except StopIteration:  # nothing within cronsim's 50-year horizon
                return None
            # Timestamps, not datetimes: aware datetimes sharing a tzinfo compare by wall time.
            if fire.timestamp() > after:
                return normalize(fire, self.timezone)
        return None

    def __str__(self) -> str:
        return f"cron[{self.expression} {self.timezone}]"

    def __repr__(self) -> str:
        return f"<CrontabTrigger ({self.expression!r}, timezone='{self.timezone}')>"
