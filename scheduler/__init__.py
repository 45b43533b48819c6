"""APScheduler wiring: Dream every intervalH, user reminders, heartbeat (scheduler issue)."""
