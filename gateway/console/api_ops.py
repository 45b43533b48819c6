"""Jobs, token usage and status: what the assistant will do next, what it costs, how it is.

Reminders come from the scheduler's SQLite store (the truth), Dream and heartbeat from
the scheduler and its persisted job state. Usage reads the per-day ledger files into a
day × job table the page draws as an SVG chart with the budget lines. Per agent
(``?agent=<id>``): its reminders, Dream and heartbeat, its usage ledger and budgets, its model
and turns; the channels and the outbox are the daemon's, the same for every agent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.scheduler.errors import ReminderError

if TYPE_CHECKING:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.config.schema import AgentDefaults
    from lucidgate.gateway.console.auth import ConsoleAuth
    from lucidgate.gateway.model.client import LiteLLMChatModel
    from lucidgate.gateway.model.usage import UsageLedger
    from lucidgate.memory.dream import Dream
    from lucidgate.memory.store import MemoryStore
    from lucidgate.scheduler import SchedulerService


class ReminderItem(BaseModel):
    id: int
    session_key: str
    text: str
    kind: str
    spec: str
    next_run: str | None
    fire_count: int


class JobItem(BaseModel):
    name: str
    enabled: bool
    next_run: str | None
    last_run: str | None
    last_result: str | None
    running: bool = False


class Jobs(BaseModel):
    scheduler_running: bool
    reminders: list[ReminderItem]
    jobs: list[JobItem]


class UsageDay(BaseModel):
    day: str
    total: int
    by_job: dict[str, int]


class Usage(BaseModel):
    days: list[UsageDay]
    by_job: dict[str, int]
    daily_budget: int | None
    dream_budget: int
    heartbeat_budget: int


class ChannelState(BaseModel):
    name: str
    up: bool
    reason: str | None = None
    outbox: dict[str, int] | None = None


class Status(BaseModel):
    version: str
    uptime_s: float
    model: str
    model_ready: bool
    model_detail: str
    channels: list[ChannelState]
    queued_turns: int
    active_turns: int
    unprocessed_history: int
    dream_running: bool


def _iso(when: datetime | None) -> str | None:
    return when.isoformat(timespec="seconds") if when is not None else None


def read_usage(folder: Path, days: int) -> list[UsageDay]:
    """Blocking: the last ``days`` daily ledger files as day × job token totals."""
    out: list[UsageDay] = []
    today = datetime.now(UTC).date()
    for offset in range(days - 1, -1, -1):
        day = (today - timedelta(days=offset)).isoformat()
        by_job: dict[str, int] = defaultdict(int)
        try:
            with (folder / f"{day}.jsonl").open("r", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        e = json.loads(line)
                        by_job[str(e.get("job", "?"))] += int(e["prompt"]) + int(e["completion"])
                    except (ValueError, KeyError, TypeError):
                        continue
        except FileNotFoundError:
            pass
        out.append(UsageDay(day=day, total=sum(by_job.values()), by_job=dict(by_job)))
    return out


class ChannelView(Protocol):
    """The running channels, and those that refused to start (the gateway)."""

    @property
    def channels(self) -> Mapping[str, object]: ...

    @property
    def failed_channels(self) -> Mapping[str, str]: ...


class TurnCounts(Protocol):
    """How many turns run and wait (the agent loop)."""

    @property
    def queued(self) -> int: ...

    @property
    def active_turns(self) -> int: ...


@dataclass(frozen=True)
class OpsParts:
    """One agent's jobs, ledger, model and turns; ``stamp`` names its messages on the bus."""

    agent: AgentDefaults
    scheduler: SchedulerService | None
    dream: Dream
    ledger: UsageLedger
    model: LiteLLMChatModel
    store: MemoryStore
    turns: TurnCounts
    stamp: str = ""


def router(auth: ConsoleAuth, *, agents: PerAgent[OpsParts], bus: MessageBus, gateway: ChannelView,
           version: str, started: float) -> APIRouter:
    api = APIRouter(prefix="/api/console", tags=[TAG], dependencies=[owner_dependency(auth)], responses=REFUSALS)
    chosen = agents.dependency()

    @api.get("/jobs", response_model=Jobs, summary="Reminders, Dream and heartbeat with their next runs")
    async def jobs(o: OpsParts = chosen) -> Jobs:
        sched, agent, dream = o.scheduler, o.agent, o.dream
        if sched is None:
            return Jobs(scheduler_running=False, reminders=[], jobs=[])
        active = await asyncio.to_thread(sched.reminders.store.active)
        reminders = [ReminderItem(id=r.id, session_key=r.session_key, text=r.text, kind=r.kind, spec=r.spec,
                                  next_run=_iso(sched.reminders.next_run(r)), fire_count=r.fire_count)
                     for r in active]
        state = sched.state
        dream_job = JobItem(name="dream", enabled=agent.dream.enabled, next_run=_iso(sched.next_dream()),
                            last_run=_iso(state.time("dream", "last_run")),
                            last_result=state.get("dream", "last_result"), running=dream.running)
        beat = JobItem(name="heartbeat", enabled=agent.heartbeat.enabled,
                       next_run=_iso(state.time("heartbeat", "next_run")) if agent.heartbeat.enabled else None,
                       last_run=_iso(state.time("heartbeat", "last_run")),
                       last_result=state.get("heartbeat", "last_result"))
        return Jobs(scheduler_running=sched.running, reminders=reminders, jobs=[dream_job, beat])

    @api.delete("/jobs/reminders/{reminder_id}", status_code=204, summary="Cancel a reminder",
                responses={404: {"description": "No active reminder with that id."}})
    async def cancel(reminder_id: int, o: OpsParts = chosen) -> None:
        sched = o.scheduler
        if sched is None:
            raise HTTPException(404, "the scheduler is not running in this process")
        reminder = await asyncio.to_thread(sched.reminders.store.get, reminder_id)
        if reminder is None or reminder.status != "active":
            raise HTTPException(404, f"there is no active reminder #{reminder_id}")
        try:
            await sched.remove_reminder(reminder.session_key, reminder_id)
        except ReminderError as exc:
            raise HTTPException(404, str(exc)) from None

    @api.get("/usage", response_model=Usage, summary="Tokens per day and per job, with the budgets")
    async def usage(days: int = Query(14, ge=1, le=90), o: OpsParts = chosen) -> Usage:
        ledger, agent = o.ledger, o.agent
        table = await asyncio.to_thread(read_usage, ledger.folder, days)
        totals: dict[str, int] = defaultdict(int)
        for day in table:
            for job, n in day.by_job.items():
                totals[job] += n
        return Usage(days=table, by_job=dict(totals), daily_budget=ledger.daily_budget,
                     dream_budget=agent.dream.token_budget, heartbeat_budget=agent.heartbeat.token_budget)

    @api.get("/status", response_model=Status, summary="Channels, outbox, model, version, uptime")
    async def status(o: OpsParts = chosen) -> Status:
        agent, model, store, turns, dream = o.agent, o.model, o.store, o.turns, o.dream
        channels = []
        try:
            outboxes: dict[str, dict[str, int]] | None = await bus.outbox_counts_by_channel()
        except Exception as exc:  # noqa: BLE001 - status must still answer
            outboxes = None
            channels.append(ChannelState(name="outbox", up=False, reason=str(exc)))
        for name in sorted(gateway.channels):
            outbox = None if outboxes is None else outboxes.get(name, {"pending": 0, "delivered": 0, "dead": 0})
            channels.append(ChannelState(name=name, up=True, outbox=outbox))
        for name, why in sorted(gateway.failed_channels.items()):
            channels.append(ChannelState(name=name, up=False, reason=why))
        ok, why = model.configured()
        await store.refresh()
        return Status(version=version, uptime_s=round(time.monotonic() - started, 1), model=agent.model,
                      model_ready=ok, model_detail="ready" if ok else why, channels=channels,
                      queued_turns=turns.queued + bus.inbound_depth_of(o.stamp), active_turns=turns.active_turns,
                      unprocessed_history=store.unprocessed_count(), dream_running=dream.running)

    return api
