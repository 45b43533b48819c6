"""What the model calls cost, from litellm's bundled (local) price map — never the network.

The map is the JSON file litellm ships (``model_prices_and_context_window_backup.json``),
read directly so ``lucid usage`` does not pay seconds for ``import litellm``. A model the
map does not know (a local server, a fake) costs ``None``: shown as "unknown", not as $0.

``costs_by_day`` prices each call of the usage journal (``usage_journal.read_journal``);
``daily_costs`` reads the journal for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from lucidgate.gateway.model.usage_journal import JournalEntry, read_journal

logger = logging.getLogger(__name__)

MAP_FILE = "model_prices_and_context_window_backup.json"


@lru_cache(maxsize=1)
def _price_map() -> dict[str, Any]:
    try:
        text = resources.files("litellm").joinpath(MAP_FILE).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError, ModuleNotFoundError):
        logger.warning("litellm's local price map is unavailable; costs are unknown")
        return {}
    return data if isinstance(data, dict) else {}


def _prices(model: str) -> dict[str, Any] | None:
    table = _price_map()
    for key in (model, model.split("/", 1)[-1]):
        entry = table.get(key)
        if isinstance(entry, dict) and "input_cost_per_token" in entry:
            return entry
    return None


def call_cost(model: str, prompt: int, completion: int, cached: int = 0) -> float | None:
    """US dollars for one call, or None when the price map does not know ``model``."""
    entry = _prices(model)
    if entry is None:
        return None
    input_rate = float(entry.get("input_cost_per_token") or 0.0)
    cached_rate = float(entry.get("cache_read_input_token_cost") or input_rate)
    output_rate = float(entry.get("output_cost_per_token") or 0.0)
    cached = min(cached, prompt)
    return (prompt - cached) * input_rate + cached * cached_rate + completion * output_rate


@dataclass(slots=True)
class CostTotals:
    dollars: float = 0.0
    calls: int = 0
    unpriced_calls: int = 0
    turns: int = 0
    models: set[str] = field(default_factory=set)

    def add(self, cost: float | None, model: str) -> None:
        self.calls += 1
        self.models.add(model)
        if cost is None:
            self.unpriced_calls += 1
        else:
            self.dollars += cost

    def describe(self) -> str:
        text = f"${self.dollars:.4f}"
        if self.unpriced_calls:
            text += f" (+{self.unpriced_calls} call(s) of models without a price)"
        return text

    @property
    def per_turn(self) -> float | None:
        return self.dollars / self.turns if self.turns else None


def daily_costs(folder: Path, days: int = 7, *, session: str | None = None) -> dict[str, CostTotals]:
    """Cost per UTC day (newest first) from the usage ledger; blocking (use a thread)."""
    return costs_by_day(read_journal(folder, days), session=session)


def costs_by_day(entries: Iterable[JournalEntry], *, session: str | None = None) -> dict[str, CostTotals]:
    """Cost per day of the journal's ``entries`` (in their order), only ``session``'s when given."""
    out: dict[str, CostTotals] = {}
    turns: dict[str, set[tuple[str, str]]] = {}
    for e in entries:
        if session is not None and e.session != session:
            continue
        totals = out.setdefault(e.day, CostTotals())
        u = e.usage
        totals.add(call_cost(e.model, u.prompt_tokens, u.completion_tokens, u.cached_tokens), e.model)
        if e.job == "turn":
            # Calls of one turn share a session and arrive together; a turn is approximated
            # by the session and the minute it ran in.
            turns.setdefault(e.day, set()).add((str(e.session), e.ts[:16]))
    for day, totals in out.items():
        totals.turns = len(turns.get(day, ()))
    return out
