"""What the model calls cost, from litellm's bundled (local) price map — never the network.

The map is the JSON file litellm ships (``model_prices_and_context_window_backup.json``),
read directly so ``lucid usage`` does not pay seconds for ``import litellm``. A model the
map does not know (a local server, a fake) costs ``None``: shown as "unknown", not as $0.

``daily_costs`` reads the usage ledger's day files (``usage/YYYY-MM-DD.jsonl``, one line
per call with model and token counts) and prices each call.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

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
    out: dict[str, CostTotals] = {}
    today = datetime.now(UTC).date()
    for offset in range(max(0, days)):
        day = (today - timedelta(days=offset)).strftime("%Y-%m-%d")
        path = folder / f"{day}.jsonl"
        if not path.exists():
            continue
        totals = CostTotals()
        turns: set[tuple[str, str]] = set()
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                    model = str(entry["model"])
                    prompt, completion = int(entry["prompt"]), int(entry["completion"])
                    cached = int(entry.get("cached", 0))
                except (ValueError, KeyError, TypeError):
                    continue
                if session is not None and entry.get("session") != session:
                    continue
                totals.add(call_cost(model, prompt, completion, cached), model)
                if entry.get("job") == "turn":
                    # Calls of one turn share a session and arrive together; a turn is
                    # approximated by the session and the minute it ran in.
                    turns.add((str(entry.get("session")), str(entry.get("ts", ""))[:16]))
        totals.turns = len(turns)
        out[day] = totals
    return out
