"""Reminders and tasks the assistant sets for a chat: validation, APScheduler jobs, firing.

A reminder belongs to the chat (session key) it was set in, and fires back into that chat
through the bus as ``⏰ Reminder: <text>``; no LLM is involved. A task fires as an inbound
message that the agent loop runs as a turn (``tasks.py``). Chats only ever see, pause,
resume and remove their own entries.

Firing claims the reminder in SQLite first, then publishes, so a crash in between loses at
most that one message and nothing is ever sent twice. A reminder whose time passed while
the gateway was down fires once on start if it is at most ``grace_s`` late; older ones are
reported to their chat as missed, never silently dropped; a task that missed its time
(however late) runs once on start, then keeps its schedule. An entry for a channel that
is not running in this process is logged and kept for a process that runs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger

from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.messages import OutboundText, Role, Target
from lucidgate.scheduler.errors import ReminderError
from lucidgate.scheduler.reminders import Purpose, Reminder, ReminderStore
from lucidgate.scheduler.tasks import MAX_TASK_CHARS, task_message
from lucidgate.scheduler.triggers import (CrontabTrigger, build_trigger, check_every, format_time,
                                parse_at)

logger = logging.getLogger(__name__)

MAX_PER_CHAT = 50
MAX_TEXT_CHARS = 1000
REMINDER_PREFIX = "⏰ Reminder: "
MISSED_PREFIX = "⏰ Missed while I was offline: "

JobFn = Callable[..., Coroutine[Any, Any, None]]


def first_due(reminder: Reminder, trigger: BaseTrigger) -> datetime | None:
    """The reminder's earliest occurrence that has not fired yet (may lie in the past)."""
    if reminder.kind == "at":
        return trigger.get_next_fire_time(None, reminder.created_at)
    after = (reminder.last_fired or reminder.created_at) + timedelta(milliseconds=1)
    return trigger.get_next_fire_time(None, after)


def upcoming(reminder: Reminder, tz: tzinfo, now: datetime | None = None) -> datetime | None:
    """When an active reminder fires next, computed from SQLite alone (``lucid jobs``)."""
    if reminder.status != "active":
        return None
    try:
        trigger = build_trigger(reminder.kind, reminder.spec, tz, reminder.created_at)
    except (ReminderError, ValueError):
        return None
    now = now or datetime.now(UTC)
    due = first_due(reminder, trigger)
    if due is not None and reminder.recurring and due < now:
        due = trigger.get_next_fire_time(None, now)
    return due


class ReminderJobs:
    def __init__(self, store: ReminderStore, bus: MessageBus, tz: tzinfo, *,
                 grace_s: float, min_every_s: int, task_token_budget: int,
                 guest_max_active: int,
                 owners_of: Callable[[str], frozenset[str]] = lambda channel: frozenset(),
                 on_sent: Callable[[str, str], Awaitable[None]] | None = None, agent: str = "") -> None:
        self.store = store
        self.agent = agent  # the agent whose reminders these are ("" the default): its tasks run there
        # The configured owners of a channel: a task runs with owner tools only while its
        # creator is still one (by default nobody is, the safe reading).
        self.owners_of = owners_of
        self.guest_max_active = guest_max_active
        self.task_token_budget = task_token_budget
        self.bus = bus
        self.tz = tz
        self.grace_s = grace_s
        self.min_every_s = min_every_s
        self.scheduler: AsyncIOScheduler | None = None
        self._wrap: Callable[[JobFn], JobFn] = lambda fn: fn
        self._spawn: Callable[[Coroutine[Any, Any, None], str], object] = (
            lambda coro, name: asyncio.create_task(coro, name=name))
        # Records a sent reminder in its chat's transcript (session key, text), so the model
        # knows it reminded the user; the composition root hands in the agent loop's.
        self.on_sent = on_sent

    def attach(self, scheduler: AsyncIOScheduler | None, *,
               wrap: Callable[[JobFn], JobFn] | None = None,
               spawn: Callable[[Coroutine[Any, Any, None], str], object] | None = None) -> None:
        """Use ``scheduler`` (None: detached); ``wrap``/``spawn`` let the service track job tasks."""
        self.scheduler = scheduler
        if wrap is not None:
            self._wrap = wrap
        if spawn is not None:
            self._spawn = spawn

    # -- the user's requests (the cron tool) -------------------------------------------------
    async def add(self, *, session_key: str, target: Target, text: str, at: str | None = None,
                  every: int | None = None, cron: str | None = None, purpose: Purpose = "reminder",
                  creator_id: str | None = None, creator_role: str | None = None,
                  chat_type: str | None = None, creator_spender: str | None = None,
                  ) -> tuple[Reminder, datetime | None]:
        text = (text or "").strip()
        limit = MAX_TASK_CHARS if purpose == "task" else MAX_TEXT_CHARS
        if not text:
            raise ReminderError("a task needs an instruction: what should I do then?" if purpose == "task"
                                else "a reminder needs a text: what should I remind about?")
        if len(text) > limit:
            raise ReminderError(f"the {purpose} text is {len(text)} characters; keep it under {limit}")
        given = [name for name, value in (("at", at), ("every", every), ("cron", cron)) if value is not None]
        if len(given) != 1:
            raise ReminderError("give exactly one of 'at' (an ISO time), 'every' (seconds) or "
                                f"'cron' (5-field expression); got {', '.join(given) or 'none'}")
        now = datetime.now(self.tz)
        if at is not None:
            kind, spec = "at", parse_at(at, self.tz, now).isoformat()
        elif every is not None:
            kind, spec = "every", str(check_every(int(every), self.min_every_s))
        else:
            kind, spec = "cron", CrontabTrigger(str(cron), self.tz).expression
        if await asyncio.to_thread(self.store.count_active, session_key) >= MAX_PER_CHAT:
            raise ReminderError(f"this chat already has {MAX_PER_CHAT} reminders and tasks; "
                                "remove some first")
        # Guests are capped over all their chats together: a per-chat cap alone is sidestepped
        # by writing from more chats.
        if creator_role == "guest" and (
                await asyncio.to_thread(self.store.count_active_by_guests) >= self.guest_max_active):
            raise ReminderError(f"guests already have {self.guest_max_active} reminders and tasks over all "
                                "chats (agents.defaults.tasks.guestMaxActive); the owner can raise it")
        reminder = await asyncio.to_thread(
            self.store.add, session_key=session_key, channel=target.channel, chat_id=target.chat_id,
            thread_id=target.thread_id, kind=kind, spec=spec, text=text, created_at=now,
            purpose=purpose, creator_id=creator_id, creator_role=creator_role, chat_type=chat_type,
            creator_spender=creator_spender)
        logger.info("%s set for %s (%s %s)", reminder.label, session_key, kind, spec)
        if self.scheduler is not None and self.bus.has_route(reminder.channel):
            return reminder, self.schedule(reminder, now)
        return reminder, self.next_run(reminder)

    async def list(self, session_key: str) -> list[tuple[Reminder, datetime | None]]:
        reminders = await asyncio.to_thread(self.store.listed, session_key)
        return [(r, self.next_run(r)) for r in reminders]

    async def remove(self, session_key: str, reminder_id: int) -> Reminder:
        reminder = await self._change(session_key, reminder_id, self.store.remove, "active or paused")
        self._unschedule(reminder.job_id)
        return reminder

    async def pause(self, session_key: str, reminder_id: int) -> Reminder:
        reminder = await self._change(session_key, reminder_id, self.store.pause, "active")
        self._unschedule(reminder.job_id)
        return reminder

    async def resume(self, session_key: str, reminder_id: int) -> tuple[Reminder, datetime | None]:
        """Schedule a paused entry again; a recurring one skips what fell due while paused."""
        await self._change(session_key, reminder_id, self.store.resume, "paused")
        reminder = await asyncio.to_thread(self.store.get, reminder_id)
        assert reminder is not None
        if self.scheduler is not None and self.bus.has_route(reminder.channel):
            return reminder, self.schedule(reminder, datetime.now(self.tz), catch_up=False)
        return reminder, self.next_run(reminder)

    async def _change(self, session_key: str, reminder_id: int, move: Callable[[str, int], bool],
                      state: str) -> Reminder:
        reminder = await asyncio.to_thread(self.store.get, reminder_id)
        if reminder is None or not await asyncio.to_thread(move, session_key, reminder_id):
            # Same answer whether it is unknown or another chat's: never reveal other chats.
            raise ReminderError(f"there is no {state} reminder or task #{reminder_id} in this chat; "
                                "use action 'list' to see this chat's entries")
        logger.info("%s: %s by %s", reminder.label, getattr(move, "__name__", "changed"), session_key)
        return reminder

    def next_run(self, reminder: Reminder) -> datetime | None:
        job = self.scheduler.get_job(reminder.job_id) if self.scheduler is not None else None
        if job is not None:
            return job.next_run_time
        return upcoming(reminder, self.tz)

    # -- scheduling ------------------------------------------------------------------------
    async def load(self) -> None:
        """Rebuild the jobs from SQLite (start of the gateway), handling what came due meanwhile."""
        now = datetime.now(self.tz)
        for reminder in await asyncio.to_thread(self.store.active):
            if not self.bus.has_route(reminder.channel):
                logger.info("reminder #%d is for channel %r, which is not running here; kept",
                            reminder.id, reminder.channel)
                continue
            self.schedule(reminder, now)

    def schedule(self, reminder: Reminder, now: datetime, *, catch_up: bool = True) -> datetime | None:
        """Add (or replace) the reminder's job; returns when it fires next.

        ``catch_up=False`` (a resumed entry): a recurring one's past occurrences are skipped."""
        assert self.scheduler is not None
        try:
            trigger = build_trigger(reminder.kind, reminder.spec, self.tz, reminder.created_at)
        except (ReminderError, ValueError) as exc:
            logger.error("reminder #%d has an unusable schedule (%s %r): %s; left as is",
                         reminder.id, reminder.kind, reminder.spec, exc)
            return None
        due = first_due(reminder, trigger)
        if not catch_up and reminder.recurring and due is not None and due < now:
            due = trigger.get_next_fire_time(None, now)
        if due is not None and due < now - timedelta(seconds=self.grace_s):
            self._spawn(self._wrap(self.report_missed)(reminder.id, due), f"missed-{reminder.job_id}")
            if not reminder.recurring:
                return None
            due = trigger.get_next_fire_time(None, now)
        if due is None:
            logger.warning("reminder #%d will never fire again; kept for the record", reminder.id)
            return None
        self.scheduler.add_job(
            self._wrap(self.fire), trigger, args=[reminder.id], id=reminder.job_id,
            name=reminder.label, replace_existing=True, next_run_time=due,
            misfire_grace_time=int(self.grace_s) or 1, coalesce=True, max_instances=1)
        return due

    def _unschedule(self, job_id: str) -> None:
        if self.scheduler is None:
            return
        try:
            self.scheduler.remove_job(job_id)
        except JobLookupError:
            pass

    # -- firing ----------------------------------------------------------------------------
    def _min_gap_s(self, reminder: Reminder) -> float:
        if reminder.kind == "every":
            return min(30.0, int(reminder.spec) / 2)
        return 30.0

    async def _claim(self, reminder: Reminder, status: str) -> bool:
        now = datetime.now(UTC)
        if reminder.recurring:
            gap = self._min_gap_s(reminder)
            # A missed report is recorded as if it fired one gap earlier: the next real
            # occurrence may come within the gap of now, and must not look like this one
            # seen twice (it would be swallowed).
            at = now - timedelta(seconds=gap) if status == "missed" else now
            return await asyncio.to_thread(self.store.claim_occurrence, reminder.id, at, gap)
        return await asyncio.to_thread(self.store.claim_once, reminder.id, status, now)  # type: ignore[arg-type]

    async def _deliver(self, reminder_id: int, status: str, text: Callable[[Reminder], str],
                       late_from: datetime | None = None) -> None:
        reminder = await asyncio.to_thread(self.store.get, reminder_id)
        if reminder is None or reminder.status != "active":
            return
        if not self.bus.has_route(reminder.channel):
            logger.warning("reminder #%d is due but channel %r is not running here; kept",
                           reminder_id, reminder.channel)
            return
        if not await self._claim(reminder, status if reminder.recurring else
                                 "done" if reminder.is_task else status):
            logger.info("reminder #%d was already delivered for this occurrence; not sent again", reminder_id)
            return
        if reminder.is_task:
            await self._start_task(reminder, late_from)
            return
        target = Target(reminder.channel, reminder.chat_id, reminder.thread_id)
        said = text(reminder)
        await self.bus.publish_outbound(OutboundText(target, said))
        if self.on_sent is not None:
            try:
                await self.on_sent(reminder.session_key, said)
            except Exception:  # the reminder went out; a transcript problem must not undo that
                logger.exception("reminder #%d: could not record it in %s", reminder_id, reminder.session_key)
        logger.info("reminder #%d %s for %s", reminder_id,
                    "fired" if status == "done" else "reported missed", reminder.session_key)

    async def _start_task(self, task: Reminder, late_from: datetime | None) -> None:
        creator_now: Role = "owner" if (task.creator_id or "") in self.owners_of(task.channel) else "guest"
        msg = task_message(task, tz=self.tz, token_budget=self.task_token_budget, creator_now=creator_now, agent=self.agent,
                           late_from=late_from)
        try:
            await self.bus.publish_inbound(msg, timeout=300)
        except (BusClosed, BusFull) as exc:
            logger.warning("%s could not start: %s; it runs again at its next time", task.label, exc)
            return
        logger.info("%s started in %s%s", task.label, task.session_key, " (catch-up)" if late_from else "")

    async def fire(self, reminder_id: int) -> None:
        await self._deliver(reminder_id, "done", lambda r: f"{REMINDER_PREFIX}{r.text}")

    async def report_missed(self, reminder_id: int, due: datetime | None = None) -> None:
        """A reminder that missed its time is reported; a task runs once, late (catch-up)."""
        when = f" (it was due {format_time(due, self.tz)})" if due is not None else ""
        logger.warning("reminder or task #%d missed its time%s", reminder_id, when)
        await self._deliver(reminder_id, "missed", lambda r: f"{MISSED_PREFIX}{r.text}{when}",
                            late_from=due or datetime.now(self.tz))
