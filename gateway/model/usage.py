"""Token usage accounting: every LLM call, per session and per job (DESIGN §10).

One append-only JSONL file per UTC day under ``<workspace>/usage/``, so "today" is one
small file and ``lucid usage --days N`` reads N files. Totals for the running process are
kept in memory for ``/status`` and the daily budget check.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memory.protocols import Usage

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


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


class UsageLedger:
    def __init__(self, folder: Path, *, daily_budget: int | None = None) -> None:
        self.folder = folder
        self.daily_budget = daily_budget
        self._lock = threading.Lock()
        self._day = _today()
        self._today_total: int | None = None
        self.session_totals: dict[str, Totals] = defaultdict(Totals)

    def _load_today(self) -> int:
        summary = self.summarise(days=1)
        return sum(t.total for t in summary.by_day.values())

    def today_total(self) -> int:
        with self._lock:
            if self._day != _today():
                self._day, self._today_total = _today(), None
            if self._today_total is None:
                self._today_total = self._load_today()
            return self._today_total

    def over_daily_budget(self) -> bool:
        return self.daily_budget is not None and self.today_total() >= self.daily_budget

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
        if session_key:
            self.session_totals[session_key].add(usage)
        with self._lock:
            if self._today_total is not None:
                self._today_total += usage.total
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._append(entry)
        else:
            loop.run_in_executor(None, self._append, entry)

    def _append(self, entry: dict) -> None:
        day = entry["ts"][:10]
        try:
            with self._lock:
                self.folder.mkdir(parents=True, exist_ok=True)
                with (self.folder / f"{day}.jsonl").open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry) + "\n")
        except OSError:
            logger.exception("could not record token usage")

    def summarise(self, days: int = 7) -> UsageSummary:
        """Read the last ``days`` daily files (blocking; call from a thread or the CLI)."""
        summary = UsageSummary()
        start = datetime.now(UTC).date()
        for offset in range(days):
            day = (start - timedelta(days=offset)).strftime("%Y-%m-%d")
            path = self.folder / f"{day}.jsonl"
            if not path.exists():
                continue
            with path.open("r", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        e = json.loads(line)
                        usage = Usage(int(e["prompt"]), int(e["completion"]), int(e.get("cached", 0)))
                    except (ValueError, KeyError, TypeError):
                        continue
                    summary.by_job[e.get("job", "?")].add(usage)
                    summary.by_session[e.get("session") or "-"].add(usage)
                    summary.by_day[day].add(usage)
        return summary
