"""What the console's routes share: the auth book, the web chat, the version and start time,
and how a request names the agent it is about.

Each route module's ``router(...)`` takes the owner dependency and only the parts of the gateway it
uses, handed in by ``mount_console``; none reaches into the gateway for more.

Several agents (``agents.list``): every console API takes the agent as the query parameter
``agent=<id>``; without it a request is about the default agent, so clients written for one
agent keep working. Each route module gets its parts per agent in a ``PerAgent`` and resolves
the request's agent through its ``dependency()``: an unknown id is a 404 naming the agents
there are, and nothing of another agent is within reach of a route once it has its parts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from fastapi import Depends, HTTPException, Query, Request

from lucidgate.channels.web import WebChannel
from lucidgate.gateway.console.auth import ConsoleAuth, ConsoleSession

TAG = "console"
# Every console route documents its refusals the same way.
REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No console session (or it expired): log in first."},
    403: {"description": "A state-changing request without this host's Origin or the CSRF token."},
    404: {"description": "No agent with the id given in `agent` (or, for some routes, no such item)."},
}
AGENT_HELP = "the agent's id (agents.list); absent: the default agent"

T = TypeVar("T")
U = TypeVar("U")


@dataclass
class ConsoleContext:
    auth: ConsoleAuth
    web: WebChannel | None  # None: channels.web is off, the console has no chat
    version: str
    started: float = field(default_factory=time.monotonic)


def owner_dependency(auth: ConsoleAuth) -> Any:
    """``Depends(...)`` for routes: the owner's session, Origin/CSRF-checked when unsafe."""
    def require(request: Request) -> ConsoleSession:
        return auth.require(request)

    return Depends(require)


class PerAgent(Generic[T]):
    """One value per agent (a route module's parts), the default agent's first."""

    def __init__(self, items: Mapping[str, T]) -> None:
        if not items:
            raise ValueError("PerAgent needs at least the default agent")
        self.items: Mapping[str, T] = MappingProxyType(dict(items))
        self.default = next(iter(self.items))

    @classmethod
    def one(cls, value: T, agent_id: str = "default") -> PerAgent[T]:
        """A single agent's value (a route module served alone, as in a unit test)."""
        return cls({agent_id: value})

    def map(self, make: Callable[[T], U]) -> PerAgent[U]:
        return PerAgent({agent_id: make(value) for agent_id, value in self.items.items()})

    def get(self, agent: str | None) -> T:
        """The value of ``agent`` (None or "": the default agent); 404 for an unknown id."""
        if not agent:
            return self.items[self.default]
        found = self.items.get(agent)
        if found is None:
            raise HTTPException(404, f"no agent {agent[:64]!r}; the agents are: {', '.join(self.items)}")
        return found

    def dependency(self) -> Any:
        """``Depends(...)`` giving a route the parts of the agent its request names."""
        def pick(agent: str | None = Query(None, max_length=64, description=AGENT_HELP)) -> T:
            return self.get(agent)

        return Depends(pick)
