"""APScheduler wiring: Dream every intervalH, reminders the assistant sets, and the heartbeat.

``SchedulerService`` is the one long-lived part the composition root creates; the rest are
its pieces (SQLite reminders, the persisted job state, DST-safe triggers, the heartbeat).
"""

from __future__ import annotations

from scheduler.errors import ReminderError, SchedulerError
from scheduler.reminders import Reminder, ReminderStore
from scheduler.service import SchedulerService
from scheduler.state import JobState

__all__ = ["JobState", "Reminder", "ReminderError", "ReminderStore", "SchedulerError",
           "SchedulerService"]
