"""A token budget for one scheduled turn (a task the ``cron`` tool set up).

A scheduled task runs unattended, so a model stuck calling tools must not spend without
end. The agent loop opens a ``TurnBudget`` for the turn (``turn_budget``: a ContextVar,
so it belongs to that turn's task alone) and the runner's model is wrapped in a
``BudgetedModel`` that counts every completion against it and refuses the next call once
it is spent. Ordinary turns have no budget and pass straight through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from lucidgate.config.errors import LucidError
from lucidgate.memory.protocols import ChatModel, ChatResult


class TaskBudgetSpent(LucidError):
    """A scheduled task used its token budget before it finished."""


@dataclass(slots=True)
class TurnBudget:
    limit: int
    job: str
    spent: int = 0


_current: ContextVar[TurnBudget | None] = ContextVar("lucid_turn_budget", default=None)


@contextmanager
def turn_budget(limit: int | None, job: str) -> Iterator[TurnBudget | None]:
    """Count the model calls made inside this block against ``limit`` tokens (None: no cap)."""
    budget = TurnBudget(limit, job) if limit is not None else None
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


class BudgetedModel:
    """A ``ChatModel`` that enforces the current turn's budget, if it has one."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult:
        budget = _current.get()
        if budget is not None and budget.spent >= budget.limit:
            raise TaskBudgetSpent(
                f"the scheduled {budget.job} used its token budget ({budget.spent:,} of "
                f"{budget.limit:,} tokens, agents.defaults.tasks.tokenBudget) before finishing")
        result = await self.inner.complete(messages, **kwargs)
        if budget is not None:
            budget.spent += result.usage.total
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
