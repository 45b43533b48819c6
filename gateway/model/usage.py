"""Token usage accounting: every LLM call, per session and per job (DESIGN §10).

One append-only JSONL file per UTC day under ``<workspace>/usage/``, so "today" is one
small file and ``lucid usage --days N`` reads N files. The files are the journal: the
gateway reads today's once at start and keeps running totals in memory for ``/status`` and
the daily budget check, so nothing on the event loop waits for the disk.

Budgets per role: the agent loop marks a turn with its role and who pays for it
(``turn_role``, ContextVars, so they belong to that turn's task and what it spawns); each
call is recorded with them, and a call is refused once today's total for that role reaches
``usage.guestDailyTokenBudget`` / ``usage.ownerDailyTokenBudget``. Guests' work has a default
budget because a guest, not the owner, decides how much of it there is; the owner's is
unlimited unless set.

Inside the guests' pool each guest (a sender on a channel, or an integration's credential,
which may name any sender it likes) gets at most ``usage.guestShare`` of it, so one chatty
integration cannot spend every other guest's day. ``usage.dailyTokenBudget`` caps all work,
but an owner's call is measured against it without the guests' spending: guests never
decide whether the owner is answered.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lucidgate.gateway.model.usage_journal import JournalEntry, read_journal
from lucidgate.memory.protocols import Usage

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Totals:
    calls: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0

    def add(self, usage: Usage) -> None:
        self.calls += 1
        self.prompt += usage.prompt_tokens
        self.completion += usage.completion_tokens
        self.cached += usage.cached_tokens

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(slots=True)
class UsageSummary:
    by_job: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    by_session: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    by_day: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    by_role: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    by_guest: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))


_turn_role: ContextVar[str | None] = ContextVar("lucid_turn_role", default=None)
_turn_spender: ContextVar[str | None] = ContextVar("lucid_turn_spender", default=None)


@contextmanager
def turn_role(role: str, spender: str | None = None) -> Iterator[None]:
    """Record and budget the model calls made inside this block as ``role``'s, paid by
    ``spender`` (who, within the role: ``telegram:42``, ``credential:<fingerprint>``)."""
    token = _turn_role.set(role)
    paid = _turn_spender.set(spender)
    try:
        yield
    finally:
        _turn_spender.reset(paid)
        _turn_role.reset(token)


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def resets_in(now: datetime | None = None) -> str:
    """When today's budgets start over: the next midnight UTC, and how long until then."""
    now = now or datetime.now(UTC)
    left = (now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)) - now
    hours, minutes = divmod(max(1, int(left.total_seconds()) // 60), 60)
    return f"it resets at 00:00 UTC, in {hours} h {minutes} min" if hours else \
        f"it resets at 00:00 UTC, in {minutes} min"


class UsageLedger:
    """Per-call token records: an in-memory running total, a journal on disk.

    ``start`` reads today's journal once (in a thread) to seed the running total; after that
    ``over_daily_budget`` and ``today_total`` are memory reads, safe to call on the event loop
    before every model call. ``record`` updates the totals at once and queues the journal line
    on one writer thread, so lines land in call order; ``aclose`` waits for the last of them.
    Used outside a running loop (the CLI), ``record`` writes synchronously.
    """

    def __init__(self, folder: Path, *, daily_budget: int | None = None,
                 role_budgets: Mapping[str, int | None] | None = None, guest_share: float = 1.0) -> None:
        self.folder = folder
        self.daily_budget = daily_budget
        self.role_budgets = dict(role_budgets or {})
        self.guest_share = guest_share
        self._day = _today()
        self._today_total = 0
        self._today_roles: dict[str, int] = {}
        self._today_guests: dict[str, int] = {}
        self.session_totals: dict[str, Totals] = defaultdict(Totals)
        self._writer: ThreadPoolExecutor | None = None
        self._last_write: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Seed today's total from the journal and open the writer (once per process)."""
        loaded, roles, guests = await asyncio.to_thread(self._load_today)
        if self._day == _today():
            self._today_total += loaded
            for role, total in roles.items():
                self._today_roles[role] = self._today_roles.get(role, 0) + total
            for guest, total in guests.items():
                self._today_guests[guest] = self._today_guests.get(guest, 0) + total
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="usage-journal")

    async def aclose(self) -> None:
        """Flush the queued journal lines, then stop the writer."""
        if self._last_write is not None:
            await asyncio.gather(self._last_write, return_exceptions=True)
            self._last_write = None
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await asyncio.to_thread(writer.shutdown, wait=True)

    def _load_today(self) -> tuple[int, dict[str, int], dict[str, int]]:
        summary = self.summarise(days=1)
        return (sum(t.total for t in summary.by_day.values()),
                {role: t.total for role, t in summary.by_role.items()},
                {guest: t.total for guest, t in summary.by_guest.items()})

    def today_total(self) -> int:
        if self._day != _today():  # a new UTC day: its journal starts empty
            self._day, self._today_total, self._today_roles, self._today_guests = _today(), 0, {}, {}
        return self._today_total

    def guest_total(self, spender: str) -> int:
        """What one guest (see ``turn_role``) spent today."""
        self.today_total()
        return self._today_guests.get(spender, 0)

    def guest_allowance(self) -> int | None:
        """The most one guest may spend today: ``guestShare`` of the guests' pool."""
        pool = self.role_budgets.get("guest")
        return None if pool is None else max(1, int(pool * self.guest_share))

    def role_total(self, role: str) -> int:
        self.today_total()  # roll the day over first
        return self._today_roles.get(role, 0)

    def over_daily_budget(self) -> bool:
        return self.daily_budget is not None and self.today_total() >= self.daily_budget

    def refusal(self) -> str | None:
        """Why the next model call may not run today (None: it may), for the current turn."""
        role = _turn_role.get()
        spent = self.today_total()
        if role != "guest":  # the owner's (and the gateway's own) work is never stopped by guests'
            spent -= self.role_total("guest")
        if self.daily_budget is not None and spent >= self.daily_budget:
            return (f"today's token budget (usage.dailyTokenBudget) is spent; raise it or wait: "
                    f"{resets_in()}")
        budget = self.role_budgets.get(role) if role is not None else None
        if role is not None and budget is not None and self.role_total(role) >= budget:
            return f"today's token budget for {role}s (usage.{role}DailyTokenBudget) is spent; {resets_in()}"
        spender = _turn_spender.get()
        allowance = self.guest_allowance()
        if role == "guest" and spender is not None and allowance is not None \
                and self.guest_total(spender) >= allowance:
            return (f"you have used your share of today's guest token budget ({allowance:,} tokens: "
                    f"usage.guestShare of usage.guestDailyTokenBudget); {resets_in()}")
        return None

    def record(self, *, job: str, session_key: str | None, model: str, usage: Usage) -> None:
        entry = {
            "ts": datetime.now(UTC).isoformat(timespec="seconds"),
            "job": job,
            "session": session_key,
            "model": model,
            "prompt": usage.prompt_tokens,
            "completion": usage.completion_tokens,
            "cached": usage.cached_tokens,
        }
        role = _turn_role.get()
        spender = _turn_spender.get()
        if role is not None:
            entry["role"] = role
        if role == "guest" and spender is not None:
            entry["spender"] = spender
        if session_key:
            self.session_totals[session_key].add(usage)
        self.today_total()  # roll the day over first
        self._today_total += usage.total
        if role is not None:
            self._today_roles[role] = self._today_roles.get(role, 0) + usage.total
        if role == "guest" and spender is not None:
            self._today_guests[spender] = self._today_guests.get(spender, 0) + usage.total
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._append(entry)
            return
        if self._writer is None:  # not started (a one-shot CLI path): one ordered writer anyway
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="usage-journal")
        # One thread runs the writes first-in first-out: the last future done means all are.
        self._last_write = loop.run_in_executor(self._writer, self._append, entry)

    def _append(self, entry: dict[str, Any]) -> None:
        day = entry["ts"][:10]
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with (self.folder / f"{day}.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
        except OSError:
            logger.exception("could not record token usage")

    def summarise(self, days: int = 7) -> UsageSummary:
        """Read the last ``days`` daily files (blocking; call from a thread or the CLI)."""
        return summary_of(read_journal(self.folder, days))


def summary_of(entries: Iterable[JournalEntry]) -> UsageSummary:
    """Totals by job, session, day, role and guest of the journal's ``entries``."""
    summary = UsageSummary()
    for e in entries:
        summary.by_job[e.job].add(e.usage)
        summary.by_session[e.session or "-"].add(e.usage)
        summary.by_day[e.day].add(e.usage)
        if e.role:
            summary.by_role[e.role].add(e.usage)
        if e.role == "guest" and e.spender:
            summary.by_guest[e.spender].add(e.usage)
    return summary
