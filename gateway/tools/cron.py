"""The ``cron`` tool: reminders and scheduled tasks for the current chat.

A *reminder* sends a fixed text back at the time; a *task* runs an agent turn in this chat
at the time with the stored instruction, as the user who set it (owner tools only if an
owner set it), and its answer arrives like any reply. Both always belong to the chat they
were set in (``ctx.target``): the tool has no way to name another chat, and
``list``/``pause``/``resume``/``remove`` only see this chat's entries, so one user can never
read or cancel another's. Scheduling, persistence and firing live in the scheduler
package; this module only translates between the model and the service.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import ClassVar, Literal

from pydantic import Field

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.base import ToolParams
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.scheduler.errors import ReminderError
from lucidgate.scheduler.reminders import Reminder
from lucidgate.scheduler.service import SchedulerService
from lucidgate.scheduler.triggers import describe, format_time


class CronTool:
    name: ClassVar[str] = "cron"
    # The how-to (reminder vs task, timezones, crontab examples) is the cron skill's, read
    # when needed; this schema goes out with every request.
    description: ClassVar[str] = (
        "Reminders and tasks for this chat (see the cron skill). add: 'text' or 'task', plus "
        "'at', 'every' or 'cron'. pause/resume/remove: 'id'.")
    owner_only: ClassVar[bool] = False

    class Params(ToolParams):
        action: Literal["add", "list", "pause", "resume", "remove"]
        text: str | None = Field(None, description="reminder text, sent as written")
        task: str | None = Field(None, description="instruction you carry out then")
        at: str | None = Field(None, description="ISO time; no offset = user's timezone")
        every: int | None = Field(None, description="seconds, >= 60")
        cron: str | None = Field(None, max_length=200, description="5-field crontab")
        id: int | None = None

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    def owner_power(self, ctx: TurnContext, params: Params) -> bool:
        """A task set by the owner runs later with the owner's tools."""
        return ctx.is_owner and params.action == "add" and params.task is not None

    async def run(self, ctx: TurnContext, params: Params) -> str:
        try:
            if params.action == "add":
                return await self._add(ctx, params)
            if params.action == "list":
                return await self._list(ctx)
            if params.id is None:
                raise ToolError(f"{params.action} needs the entry's 'id' (see action 'list')")
            if params.action == "pause":
                paused = await self.service.pause_reminder(ctx.session_key, params.id)
                return f"Paused {paused.label}: {paused.text} (resume it with action 'resume')"
            if params.action == "resume":
                resumed, next_run = await self.service.resume_reminder(ctx.session_key, params.id)
                return f"Resumed {resumed.label}{self._next(next_run)}: {resumed.text}"
            removed = await self.service.remove_reminder(ctx.session_key, params.id)
            return f"Removed {removed.label}: {removed.text}"
        except ReminderError as exc:
            raise ToolError(str(exc)) from None

    def _next(self, when: datetime | None) -> str:
        return f", next {format_time(when, self.service.tz)}" if when is not None else ""

    async def _add(self, ctx: TurnContext, params: Params) -> str:
        if params.id is not None:
            raise ToolError("'id' is only for actions 'pause', 'resume' and 'remove'")
        if (params.text is None) == (params.task is None):
            raise ToolError("give either 'text' (a reminder) or 'task' (an instruction to carry out), "
                            "not both and not neither")
        is_task = params.task is not None
        entry, next_run = await self.service.add_reminder(
            session_key=ctx.session_key, target=ctx.target, text=(params.task if is_task else params.text) or "",
            at=params.at, every=params.every, cron=params.cron,
            purpose="task" if is_task else "reminder", creator_id=ctx.sender_id,
            creator_role=ctx.role, chat_type=ctx.chat_type, creator_spender=ctx.spender)
        tz = self.service.tz
        when = describe(entry.kind, entry.spec, tz)
        line = f"{entry.label.capitalize()} set ({when}): {entry.text}"
        if entry.recurring and next_run is not None:
            line += f"\nFirst one: {format_time(next_run, tz)}."
        if is_task and not ctx.is_owner:
            line += "\nIt will run with a guest's abilities (no owner tools)."
        return line

    async def _list(self, ctx: TurnContext) -> str:
        items = await self.service.list_reminders(ctx.session_key)
        if not items:
            return "No reminders or tasks in this chat."
        tz = self.service.tz
        lines = [f"Reminders and tasks in this chat ({len(items)}):"]
        for entry, next_run in items:
            lines.append(_line(entry, next_run, tz))
        return "\n".join(lines)


def _line(entry: Reminder, next_run: datetime | None, tz: tzinfo) -> str:
    paused = entry.status == "paused"
    marks = ("[task] " if entry.is_task else "") + ("[paused] " if paused else "")
    nxt = (f"; next {format_time(next_run, tz)}"
           if next_run is not None and entry.recurring and not paused else "")
    return f"#{entry.id} {marks}{describe(entry.kind, entry.spec, tz)}{nxt}: {entry.text}"
