"""APScheduler wiring: Dream every intervalH, reminders the assistant sets, and the heartbeat.

``SchedulerService`` is the one long-lived part the composition root creates; the rest are
its pieces (SQLite reminders, the persisted job state, DST-safe triggers, the heartbeat).

The names load on first use (PEP 562), so a tool that only needs ``scheduler.errors`` does
not pull APScheduler into a one-shot ``lucid agent -m``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.config.lazy import lazy_names

if TYPE_CHECKING:
    from lucidgate.scheduler.errors import ReminderError, SchedulerError
    from lucidgate.scheduler.reminders import Reminder, ReminderStore
    from lucidgate.scheduler.service import SchedulerService
    from lucidgate.scheduler.state import JobState

__all__ = ["JobState", "Reminder", "ReminderError", "ReminderStore", "SchedulerError",
           "SchedulerService"]

_HOMES = {"JobState": "state", "Reminder": "reminders", "ReminderError": "errors", "ReminderStore": "reminders",
          "SchedulerError": "errors", "SchedulerService": "service"}

__getattr__ = lazy_names(__name__, _HOMES)
