"""Scheduled tasks: what the scheduler publishes when a task (not a reminder) comes due.

A task is an instruction ("every weekday at 8: summarise my open todos") that an ordinary
agent turn carries out in the chat it was set in. The scheduler does not run the agent:
it publishes an ``InboundMessage`` carrying a ``ScheduledTask`` on the bus,
from the sender who created the task, and the agent loop runs the turn as that sender
(owner tools only if they were an owner when they set it and still are), under the
per-task token budget. The scheduler is this message's gate: it stamps the creator's role
as the config has it now (``InboundMessage.role``), the task keeps the role they had when
they set it (``ScheduledTask.role``), and the loop takes the lower of the two. The answer goes out like any reply and the turn is in the chat's
transcript, so the assistant knows later what it did.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from lucidgate.channels.messages import InboundMessage, Role, ScheduledTask
from lucidgate.scheduler.reminders import Reminder
from lucidgate.scheduler.triggers import describe, format_time

MAX_TASK_CHARS = 2000


def task_message(task: Reminder, *, tz: tzinfo, token_budget: int, creator_now: Role,
                 late_from: datetime | None = None, agent: str = "") -> InboundMessage:
    """The inbound message that runs ``task`` once now (``late_from``: the missed due time;
    ``creator_now``: the creator's role on the task's channel today; ``agent``: whose task)."""
    when = describe(task.kind, task.spec, tz)
    late = (f" It was due {format_time(late_from, tz)}, while the gateway was offline; this is "
            "the one catch-up run." if late_from is not None else "")
    text = (f"[Scheduled task #{task.id} ({when}), set up earlier in this chat. Carry it out now; "
            f"your answer is delivered to this chat as written.{late}]\n{task.text}")
    role: Role = "owner" if task.creator_role == "owner" else "guest"
    chat_type = task.chat_type if task.chat_type in ("private", "group", "channel", "thread") else "private"
    return InboundMessage(
        channel=task.channel, chat_id=task.chat_id, sender_id=task.creator_id or "",
        text=text, chat_type=chat_type,  # type: ignore[arg-type]
        thread_id=task.thread_id, silent=True, role=creator_now,
        task=ScheduledTask(job=f"task:{task.id}", role=role, token_budget=token_budget),
        spender=task.creator_spender, agent=agent)
