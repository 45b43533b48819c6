"""The scheduler service: one APScheduler ``AsyncIOScheduler`` on the gateway's event loop.

Jobs (all coroutines run as separate tasks by APScheduler's asyncio executor, so a slow
Dream never delays a reminder):

* ``dream``      — every ``dream.intervalH`` hours, ``max_instances=1``, coalesced. Its last
  run is persisted in ``state/scheduler.json``, so a gateway restarted more often than the
  interval still dreams: an overdue Dream runs soon after start. A Dream already running
  (``/dream``, ``lucid dream``) is never started twice: the job logs "already running".
* ``heartbeat``  — every ``heartbeat.intervalMin`` minutes when enabled (``heartbeat.py``).
* ``reminder:N`` — one per active reminder or scheduled task (``reminder_jobs.py``; SQLite
  is the truth). A task publishes an inbound turn for the agent loop (``tasks.py``).

APScheduler drops a job that missed its time silently unless someone listens (DESIGN §11):
missed runs, failures and skipped overlapping runs are logged here, and a missed reminder
is reported to its chat.

Only the daemon runs the background jobs (``background_jobs``); a terminal ``lucid agent``
beside it runs just the reminders of its own chats.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.events import (EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED,
                                JobEvent, JobExecutionEvent)
from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import Target
from lucidgate.config.schema import Config
from lucidgate.memory.dream import Dream
from lucidgate.memory.errors import DreamBusy
from lucidgate.scheduler.errors import SchedulerError
from lucidgate.scheduler.heartbeat import CHANNEL as HEARTBEAT_CHANNEL
from lucidgate.scheduler.heartbeat import Heartbeat
from lucidgate.scheduler.reminder_jobs import JobFn, ReminderJobs
from lucidgate.scheduler.reminders import Purpose, Reminder
from lucidgate.scheduler.state import JobState
from lucidgate.scheduler.triggers import format_time

logger = logging.getLogger(__name__)

STARTUP_DELAY_S = 60.0  # an overdue job waits this long after start (or one interval, if shorter)
STOP_TIMEOUT_S = 10.0


def scheduler_timezone(config: Config) -> ZoneInfo:
    """The owner's timezone, which every job's clock uses; a clear error for a name that is not one."""
    try:
        return ZoneInfo(config.agent.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise SchedulerError(f"unknown timezone {config.agent.timezone!r} (agents.defaults.timezone); "
                             "use an IANA name such as 'Europe/Berlin'") from None


class SchedulerService:
    def __init__(self, config: Config, *, bus: MessageBus, dream: Dream, state: JobState,
                 reminders: ReminderJobs, heartbeat: Heartbeat, background_jobs: bool = True) -> None:
        """The jobs (``reminders``, ``heartbeat``) and ``state`` (``state/scheduler.json``) are
        the composition root's, built over the workspace's stores; this schedules them."""
        self.config = config
        self.bus = bus
        self.dream = dream
        self.background_jobs = background_jobs
        self.tz = reminders.tz
        self.state = state
        self.reminders = reminders
        self.heartbeat = heartbeat
        self._scheduler: AsyncIOScheduler | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._heartbeat_route = False

    # -- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> SchedulerService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    async def start(self) -> None:
        scheduler = AsyncIOScheduler(timezone=self.tz)
        scheduler.add_listener(self._on_event, EVENT_JOB_MISSED | EVENT_JOB_ERROR | EVENT_JOB_MAX_INSTANCES)
        scheduler.start()
        self._scheduler = scheduler
        try:
            await asyncio.to_thread(self.state.load)
            self.reminders.attach(scheduler, wrap=self._tracked, spawn=self._spawn)
            if self.background_jobs:
                await self._add_background_jobs()
        except BaseException:
            await self.stop()
            raise
        try:
            await self.reminders.load()
        except Exception:  # a damaged reminders file must not take Dream and chats down with it
            logger.exception("could not load reminders from %s; they will not fire until it is "
                             "repaired", self.reminders.store.path)
        logger.info("scheduler started (%s): %s", self.tz, self.status_line())

    async def _add_background_jobs(self) -> None:
        assert self._scheduler is not None
        dream_cfg = self.config.agent.dream
        if dream_cfg.enabled:
            interval = dream_cfg.interval_h * 3600
            self._add_interval_job("dream", self._dream_job, interval, grace=max(60.0, interval))
        else:
            logger.info("scheduled Dream is off (dream.enabled = false); /dream still works")
        beat_cfg = self.config.agent.heartbeat
        if beat_cfg.enabled:
            self.bus.subscribe(HEARTBEAT_CHANNEL, self.heartbeat.on_reply)
            self._heartbeat_route = True
            interval = self.heartbeat.interval_s
            self._add_interval_job("heartbeat", self._heartbeat_job, interval, grace=max(30.0, interval))
        planned = {job_id: job.next_run_time for job_id in ("dream", "heartbeat")
                   if (job := self._job(job_id)) is not None and job.next_run_time is not None}
        for job_id, when in planned.items():
            await asyncio.to_thread(self.state.update, job_id, next_run=when)

    def _add_interval_job(self, job_id: str, fn: JobFn, interval_s: float, *, grace: float) -> None:
        assert self._scheduler is not None
        now = datetime.now(UTC)
        period = timedelta(seconds=interval_s)
        # The persisted plan survives restarts; a shorter interval than last time applies at once.
        due = (self.state.time(job_id, "last_run") or now) + period
        planned = self.state.time(job_id, "next_run")
        if planned is not None:
            due = min(due, planned)
        if due <= now:
            logger.info("%s is overdue (was due %s); running it shortly", job_id, format_time(due, self.tz))
            due = now + timedelta(seconds=min(STARTUP_DELAY_S, interval_s))
        # UTC interval: absolute time, so a DST change never shortens or repeats a period.
        self._scheduler.add_job(
            self._tracked(fn), IntervalTrigger(seconds=interval_s, timezone=UTC), id=job_id,
            name=job_id, replace_existing=True, next_run_time=due, coalesce=True, max_instances=1,
            misfire_grace_time=int(grace))

    async def stop(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        self.reminders.attach(None)
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler shuts down on the loop's next turn
        if self._heartbeat_route:
            self.bus.unsubscribe(HEARTBEAT_CHANNEL)
            self._heartbeat_route = False
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()  # a Dream cancelled here commits what it applied; its batch reruns
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)

    # -- job plumbing ------------------------------------------------------------------------
    def _tracked(self, fn: JobFn) -> JobFn:
        """Wrap a job so ``stop`` can cancel it and a failure is logged, never lost."""
        @functools.wraps(fn)
        async def run(*args: Any) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.add(task)
            try:
                await fn(*args)
            finally:
                if task is not None:
                    self._tasks.discard(task)
        return run

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("scheduler task %s failed", task.get_name(), exc_info=task.exception())

    def _on_event(self, event: JobEvent) -> None:
        """APScheduler listener: nothing that goes wrong with a job may go unnoticed."""
        if event.code == EVENT_JOB_MISSED:
            assert isinstance(event, JobExecutionEvent)
            logger.warning("scheduled job %s missed its run time %s", event.job_id,
                           format_time(event.scheduled_run_time, self.tz))
            if event.job_id.startswith("reminder:"):
                rid = int(event.job_id.split(":", 1)[1])
                self._spawn(self._tracked(self.reminders.report_missed)(rid, event.scheduled_run_time),
                            f"missed-{event.job_id}")
        elif event.code == EVENT_JOB_ERROR:
            assert isinstance(event, JobExecutionEvent)
            logger.error("scheduled job %s failed: %r", event.job_id, event.exception)
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            logger.warning("scheduled job %s skipped a run: the previous run is still going", event.job_id)

    def _job(self, job_id: str) -> Job | None:
        return self._scheduler.get_job(job_id) if self._scheduler is not None else None

    async def _record(self, job_id: str, **fields: Any) -> None:
        job = self._job(job_id)
        if job is not None and job.next_run_time is not None:
            fields["next_run"] = job.next_run_time
        await asyncio.to_thread(self.state.update, job_id, **fields)

    # -- the jobs ------------------------------------------------------------------------------
    async def _dream_job(self) -> None:
        started = datetime.now(self.tz)
        try:
            if self.dream.running:
                raise DreamBusy()
            report = await self.dream.run()
        except DreamBusy:
            logger.info("scheduled Dream skipped: a Dream is already running")
            await self._record("dream", last_result="skipped: already running", last_attempt=started)
            return
        except Exception as exc:
            logger.exception("scheduled Dream failed")
            await self._record("dream", last_run=started, last_result=f"failed: {exc}"[:300])
            return
        summary = report.summary().splitlines()[0]
        if report.error:
            summary += f" (error: {report.error})"
        logger.info("scheduled %s", summary)
        await self._record("dream", last_run=started, last_result=summary[:300])

    async def _heartbeat_job(self) -> None:
        started = datetime.now(self.tz)
        try:
            outcome = await self.heartbeat.beat()
        except Exception as exc:
            logger.exception("heartbeat failed")
            outcome = f"failed: {exc}"[:300]
        await self._record("heartbeat", last_run=started, last_result=outcome)

    # -- for the cron tool and /status ---------------------------------------------------------
    async def add_reminder(self, *, session_key: str, target: Target, text: str, at: str | None = None,
                           every: int | None = None, cron: str | None = None,
                           purpose: Purpose = "reminder", creator_id: str | None = None,
                           creator_role: str | None = None, chat_type: str | None = None,
                           creator_spender: str | None = None,
                           ) -> tuple[Reminder, datetime | None]:
        return await self.reminders.add(session_key=session_key, target=target, text=text,
                                        at=at, every=every, cron=cron, purpose=purpose,
                                        creator_id=creator_id, creator_role=creator_role,
                                        chat_type=chat_type, creator_spender=creator_spender)

    async def pause_reminder(self, session_key: str, reminder_id: int) -> Reminder:
        return await self.reminders.pause(session_key, reminder_id)

    async def resume_reminder(self, session_key: str, reminder_id: int) -> tuple[Reminder, datetime | None]:
        return await self.reminders.resume(session_key, reminder_id)

    async def list_reminders(self, session_key: str) -> list[tuple[Reminder, datetime | None]]:
        return await self.reminders.list(session_key)

    async def remove_reminder(self, session_key: str, reminder_id: int) -> Reminder:
        return await self.reminders.remove(session_key, reminder_id)

    def next_dream(self) -> datetime | None:
        job = self._job("dream")
        return job.next_run_time if job is not None else None

    def status_line(self) -> str:
        """One line for ``/status``: when Dream runs next, reminders, heartbeat."""
        if not self.running:
            return "scheduler: not running"
        parts = []
        nxt = self.next_dream()
        if not self.config.agent.dream.enabled:
            parts.append("scheduled Dream off")
        elif nxt is None:
            parts.append("no scheduled Dream in this process")
        else:
            parts.append(f"next Dream {format_time(nxt, self.tz)}"
                         + (" (one is running now)" if self.dream.running else ""))
        jobs = self._scheduler.get_jobs() if self._scheduler is not None else []
        parts.append(f"{sum(1 for j in jobs if j.id.startswith('reminder:'))} reminder(s) scheduled (tasks included)")
        beat = self._job("heartbeat")
        parts.append(f"heartbeat every {self.config.agent.heartbeat.interval_min:g} min" if beat
                     else "heartbeat off")
        return "scheduler: " + "; ".join(parts)
