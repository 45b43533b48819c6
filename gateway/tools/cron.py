"""The ``cron`` tool: the assistant sets, lists and removes reminders for the current chat.

A reminder always fires back into the chat it was set in (``ctx.target``); the tool has no
way to name another chat, and ``list``/``remove`` only see this chat's reminders, so one
user can never read or cancel another's. Scheduling, persistence and firing live in the
scheduler package; this module only translates between the model and the service.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from gateway.errors import ToolError
from gateway.tools.base import ToolParams
from gateway.turn import TurnContext
from scheduler.errors import ReminderError
from scheduler.service import SchedulerService
from scheduler.triggers import describe, format_time


class CronTool:
    name: ClassVar[str] = "cron"
    description: ClassVar[str] = (
        "Reminders for this chat. action='add' with 'text' and exactly one of: 'at' (ISO time, "
        "e.g. 2026-04-03T09:00; without an offset it means the user's configured timezone), "
        "'every' (seconds, at least 60) or 'cron' (5-field crontab, e.g. '0 9 * * 1-5' = 09:00 "
        "Mon-Fri). The reminder is sent to this chat as '⏰ Reminder: <text>'. action='list' "
        "shows this chat's reminders; action='remove' with 'id' deletes one.")
    owner_only: ClassVar[bool] = False

    class Params(ToolParams):
        action: Literal["add", "list", "remove"]
        text: str | None = Field(None, description="What to remind about (add).")
        at: str | None = Field(None, description="One-off time, ISO 8601 (add).")
        every: int | None = Field(None, description="Repeat period in seconds (add).")
        cron: str | None = Field(None, max_length=200, description="5-field cron expression (add).")
        id: int | None = Field(None, description="Reminder number (remove).")

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    async def run(self, ctx: TurnContext, params: Params) -> str:
        try:
            if params.action == "add":
                return await self._add(ctx, params)
            if params.action == "list":
                return await self._list(ctx)
            if params.id is None:
                raise ToolError("remove needs the reminder's 'id' (see action 'list')")
            removed = await self.service.remove_reminder(ctx.session_key, params.id)
            return f"Removed reminder #{removed.id}: {removed.text}"
        except ReminderError as exc:
            raise ToolError(str(exc)) from None

    async def _add(self, ctx: TurnContext, params: Params) -> str:
        if params.id is not None:
            raise ToolError("'id' is only for action 'remove'")
        reminder, next_run = await self.service.add_reminder(
            session_key=ctx.session_key, target=ctx.target, text=params.text or "",
            at=params.at, every=params.every, cron=params.cron)
        tz = self.service.tz
        when = describe(reminder.kind, reminder.spec, tz)
        line = f"Reminder #{reminder.id} set ({when}): {reminder.text}"
        if reminder.recurring and next_run is not None:
            line += f"\nFirst one: {format_time(next_run, tz)}."
        return line

    async def _list(self, ctx: TurnContext) -> str:
        items = await self.service.list_reminders(ctx.session_key)
        if not items:
            return "No reminders in this chat."
        tz = self.service.tz
        lines = [f"Reminders in this chat ({len(items)}):"]
        for reminder, next_run in items:
            nxt = f"; next {format_time(next_run, tz)}" if next_run is not None and reminder.recurring else ""
            lines.append(f"#{reminder.id} {describe(reminder.kind, reminder.spec, tz)}{nxt}: {reminder.text}")
        return "\n".join(lines)
