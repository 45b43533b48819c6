"""``lucid jobs``: what the scheduler will do next and what it did last.

Reads the scheduler's files (``state/scheduler.json`` and ``state/reminders.sqlite``), so it
works whether or not the gateway is running, and from another process than the gateway.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Annotated, Any

import typer

from lucidgate.gateway.cli._common import AgentOption, ConfigOption, console, err_console, new_table, workspace_parts


def _when(value: Any, tz: tzinfo) -> str:
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str) and value:
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return value
    else:
        return "—"
    return when.astimezone(tz).strftime("%Y-%m-%d %H:%M")


def register(app: typer.Typer) -> None:
    app.command()(jobs)


def jobs(
    show_all: Annotated[bool, typer.Option("--all", help="Also list finished, missed and removed reminders and tasks.")] = False,
    config_path: ConfigOption = None,
    agent_id: AgentOption = None,
) -> None:
    """List scheduled jobs (Dream, heartbeat, reminders, tasks): next run, last run and result."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    parts = workspace_parts(config_path, agent_id)
    agent = parts.config.agent
    try:
        tz: tzinfo = ZoneInfo(agent.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        err_console.print(f"unknown timezone {agent.timezone!r} (agents.defaults.timezone); showing UTC")
        tz = ZoneInfo("UTC")
    state = parts.job_state.load()

    table = new_table("job", "schedule", "next run", "last run", "last result",
                      title=f"scheduled jobs (times in {tz})")
    dream = state.get("dream", {})
    table.add_row("dream", f"every {agent.dream.interval_h:g} h" if agent.dream.enabled else "off",
                  _when(dream.get("next_run"), tz) if agent.dream.enabled else "—",
                  _when(dream.get("last_run"), tz), dream.get("last_result", "never ran"))
    beat = state.get("heartbeat", {})
    last = beat.get("last_result", "never ran")
    if beat.get("last_reply"):
        last += f"; answer: {beat['last_reply']}"
    table.add_row("heartbeat",
                  f"every {agent.heartbeat.interval_min:g} min" if agent.heartbeat.enabled else "off",
                  _when(beat.get("next_run"), tz) if agent.heartbeat.enabled else "—",
                  _when(beat.get("last_run"), tz), last)
    console.print(table)

    # A look must not create the database: read it only when the scheduler made one.
    reminders = parts.reminders.all() if parts.reminders_path.exists() else []
    if not show_all:
        reminders = [r for r in reminders if r.status in ("active", "paused")]
    if not reminders:
        console.print("no reminders or tasks" if show_all
                      else "no active reminders or tasks (--all shows finished ones)")
        return
    # The scheduler's modules (APScheduler, ~0.1 s) load only when there is a reminder to show.
    from lucidgate.scheduler.reminder_jobs import upcoming
    from lucidgate.scheduler.triggers import describe

    rtable = new_table("id", "type", "chat", "schedule", "next run", "status", "last fired", "text",
                       title="reminders and tasks")
    for r in sorted(reminders, key=lambda r: r.id):
        kind = f"task ({r.creator_role or 'guest'})" if r.is_task else "reminder"
        rtable.add_row(str(r.id), kind, r.session_key, describe(r.kind, r.spec, tz),
                       _when(upcoming(r, tz), tz), r.status, _when(r.last_fired, tz),
                       r.text if len(r.text) <= 60 else r.text[:59] + "…")
    console.print(rtable)
