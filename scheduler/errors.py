"""Errors raised by the scheduler.

    SchedulerError      the scheduler cannot run as configured (e.g. an unknown timezone)
    └── ReminderError   a reminder request the user has to fix: a bad time or cron
                        expression, a time in the past, an unknown id
"""

from __future__ import annotations

from lucidgate.config.errors import LucidError


class SchedulerError(LucidError):
    """The scheduler cannot run as configured; the message says which setting to fix."""


class ReminderError(SchedulerError):
    """A reminder request was refused; the message tells the user (or the model) what to change."""
