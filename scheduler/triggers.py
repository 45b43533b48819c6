"""Reminder schedules: parsing what the user asked for, and DST-safe APScheduler triggers.

Three kinds, stored as ``(kind, spec)`` text in SQLite so a restart can rebuild the trigger:

* ``at``    — one ISO 8601 time; a naive time means the configured timezone.
* ``every`` — a period in seconds, on a grid anchored at creation (restarts don't drift it).
* ``cron``  — a standard 5-field crontab expression in the configured timezone.

Two traps of APScheduler 3.x are handled here rather than left to surprise users:

1. ``CronTrigger.from_crontab`` numbers weekdays from Monday (0 = Monday), while every
   crontab the user has ever seen counts from Sunday (0 = Sunday, ``1-5`` = Mon–Fri).
   The weekday field is translated to explicit day names.
2. Its ``CronTrigger`` can return the same or an earlier time across a DST fall-back with
   ``zoneinfo`` timezones (agronholm/apscheduler#1021), which makes the scheduler loop forever
   or fire a job again and again. ``WallClockCronTrigger`` matches the expression on plain
   wall-clock time and maps the result to real time itself, so fire times only move forward:
   a wall-clock time that happens twice fires once, one skipped by spring-forward fires
   right after the jump.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from scheduler.errors import ReminderError

Kind = Literal["at", "every", "cron"]

MAX_AHEAD = timedelta(days=3660)  # ten years: further is almost surely a typo
MAX_EVERY_S = 366 * 24 * 3600
_MAX_STEPS = 5000  # bound on wall-clock candidates examined for one fire time
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab order: 0 = Sunday
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
        return WallClockCronTrigger(spec, tz)
    raise ReminderError(f"unknown reminder kind {kind!r}")


def _weekday(text: str) -> int:
    if text.isdigit() and 0 <= int(text) <= 7:
        return int(text)
    if text[:3] in _WEEKDAYS and len(text) == 3:
        return _WEEKDAYS.index(text)
    raise ValueError(f"{text!r} is not a weekday (0-7 or sun-sat; 0 and 7 are Sunday)")


def crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field as APScheduler day names (crontab counts from Sunday)."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.lower().split(","):
        base, slash, step_text = part.partition("/")
        if slash and not (step_text.isdigit() and int(step_text) >= 1):
            raise ValueError(f"bad step in {part!r}")
        step = int(step_text) if slash else 1
        if base == "*":
            low, high = 0, 6
        elif "-" in base:
            first, last = base.split("-", 1)
            low, high = _weekday(first), _weekday(last)
        else:
            low = _weekday(base)
            high = 6 if slash else low
        if low > high:
            raise ValueError(f"range {part!r} runs backwards")
        days.update(day % 7 for day in range(low, high + 1, step))
    if len(days) == 7:
        return "*"
    return ",".join(_WEEKDAYS[d] for d in sorted(days))


class WallClockCronTrigger(BaseTrigger):
    """A crontab expression evaluated on wall-clock time in ``tz``; fire times never repeat."""

    __slots__ = ("expression", "timezone", "_floating")

    def __init__(self, expression: str, tz: tzinfo) -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise ReminderError(f"invalid cron expression {expression!r}: {len(fields)} field(s); {_CRON_HELP}")
        minute, hour, day, month, weekday = fields
        if day != "*" and weekday != "*":
            raise ReminderError(
                f"cron expression {expression!r} restricts both the day of the month and the "
                "weekday, which crontab and this scheduler read differently; set one of them "
                "to '*' (use two reminders if you need both)")
        try:
            # "Floating" time: wall-clock values computed as if they were UTC, so no DST
            # arithmetic happens inside APScheduler's field search.
            self._floating = CronTrigger(minute=minute, hour=hour, day=day, month=month,
                                         day_of_week=crontab_weekdays(weekday), timezone=UTC)
        except ValueError as exc:
            raise ReminderError(f"invalid cron expression {expression!r}: {exc}; {_CRON_HELP}") from None
        self.expression = " ".join(fields)
        self.timezone = tz
        if self.get_next_fire_time(None, datetime.now(UTC)) is None:
            raise ReminderError(f"cron expression {expression!r} never fires (no such date)")

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        """The first fire time after ``previous_fire_time`` (or at/after ``now`` without one)."""
        reference = previous_fire_time if previous_fire_time is not None else now
        wall = reference.astimezone(self.timezone).replace(tzinfo=None, fold=0)
        probe = wall + timedelta(microseconds=1) if previous_fire_time is not None else wall
        for _ in range(_MAX_STEPS):
            floating = self._floating.get_next_fire_time(None, probe.replace(tzinfo=UTC))
            if floating is None:
                return None
            local = floating.replace(tzinfo=self.timezone)  # fold=0: the first of a repeated hour
            # Timestamps, not datetimes: aware datetimes sharing a tzinfo compare by wall time.
            late_enough = (local.timestamp() > previous_fire_time.timestamp()
                           if previous_fire_time is not None
                           else local.timestamp() >= now.timestamp())
            if late_enough:
                return normalize(local, self.timezone)
            probe = floating.replace(tzinfo=None) + timedelta(seconds=1)
        return None

    def __str__(self) -> str:
        return f"cron[{self.expression} {self.timezone}]"

    def __repr__(self) -> str:
        return f"<WallClockCronTrigger ({self.expression!r}, timezone='{self.timezone}')>"
