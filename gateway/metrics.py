"""Prometheus metrics for one gateway (its own registry: no globals, tests don't collide).

Besides our counters the registry carries the process collector (``process_*``: memory,
CPU, open files, start time) and ``lucid_build_info``. Counters do not export the
``_created`` series: a per-series timestamp that doubles the output and that no
dashboard here uses. The model's last call result is kept for ``/readyz``.

Several agents (``agents.list``): what an agent does — messages in and out, turns, model
calls and tokens, tool calls, consolidations, Dream runs, queued and active turns, session
workers — carries an ``agent`` label with the agent's id. Each agent's parts count through
``for_agent(id)``, a view over the same series with the label filled in. With one agent
there is no ``agent`` label at all, so the series are exactly those of a gateway from before
several agents. What is the daemon's rather than an agent's has no ``agent`` label: dead
letters, delivery lanes, fallbacks between models, and error replies counted on the bus
(their agent is not known there: ``agent=""``, which Prometheus reads as no label).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from lucidgate.gateway import __version__

# Process-wide in prometheus_client; only our registries exist in this process.
prometheus_client.disable_created_metrics()


@dataclass(frozen=True)
class LastCall:
    """The outcome of the most recent model call (any job)."""

    ok: bool
    job: str
    at: float  # time.time()


TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class QueueView(Protocol):
    """What the turn gauges read from the bus."""

    @property
    def inbound_depth(self) -> int: ...

    @property
    def delivery_lanes(self) -> int: ...

    def inbound_depth_of(self, agent: str) -> int: ...


class TurnView(Protocol):
    """What the turn gauges read from an agent's loop."""

    @property
    def queued(self) -> int: ...

    @property
    def active_turns(self) -> int: ...

    @property
    def session_workers(self) -> int: ...


class _Series:
    """The registry and its collectors, shared by a ``Metrics`` and its per-agent views."""

    def __init__(self, by_agent: bool) -> None:
        self.by_agent = by_agent
        self.registry = r = CollectorRegistry(auto_describe=True)
        a = ["agent"] if by_agent else []
        self.messages_in = Counter("lucid_messages_in", "Inbound messages by channel", [*a, "channel"], registry=r)
        self.messages_out = Counter("lucid_messages_out", "Outbound replies by channel", [*a, "channel"], registry=r)
        self.turn = Histogram("lucid_turn_seconds", "Turn latency", a, buckets=TURN_BUCKETS, registry=r)
        self.llm = Counter("lucid_llm_calls", "LLM calls by job and status", [*a, "job", "status"], registry=r)
        self.tokens = Counter("lucid_llm_tokens", "LLM tokens by job and kind", [*a, "job", "kind"], registry=r)
        self.tools = Counter("lucid_tool_calls", "Tool calls by tool and status", [*a, "tool", "status"], registry=r)
        self.consolidations = Counter("lucid_consolidations", "Consolidation rounds", [*a, "status"], registry=r)
        self.dreams = Counter("lucid_dream_runs", "Dream runs", [*a, "status"], registry=r)
        self.queue = Gauge("lucid_inbound_queue_depth", "Messages waiting on the bus", a, registry=r)
        self.active = Gauge("lucid_active_turns", "Turns running now", a, registry=r)
        self.workers = Gauge("lucid_session_workers", "Session worker tasks alive (idle ones retire)", a,
                             registry=r)
        self.lanes = Gauge("lucid_delivery_lanes", "Delivery lane tasks alive (idle ones retire)", registry=r)
        ProcessCollector(registry=r)
        Info("lucid_build", "lucidgate build", registry=r).info(
            {"version": __version__, "python": platform.python_version()})
        self.dead = Counter("lucid_outbox_dead_letters", "Outbound items given up, by channel", ["channel"],
                            registry=r)
        # Here, not in each model chain: every agent's chain counts into the one series.
        self.fallbacks = Counter("lucid_llm_fallbacks", "Switches to a fallback model",
                                 ["from_model", "to_model"], registry=r)
        self.last_llm: LastCall | None = None


class Metrics:
    """The gateway's metrics (``Metrics(agents=[...])`` for several agents), or, from
    ``for_agent``, one agent's view of them."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, agents: Sequence[str] = (), *, _series: _Series | None = None, _agent: str = "") -> None:
        self._s = _series if _series is not None else _Series(by_agent=len(agents) > 1)
        self.registry = self._s.registry
        self.agent = _agent  # "": the whole gateway (and, by_agent, counts with agent="")
        self._a: tuple[str, ...] = (_agent,) if self._s.by_agent else ()

    def for_agent(self, agent_id: str) -> Metrics:
        """Agent ``agent_id``'s view: the same series, counted under its id (no label with one agent)."""
        return Metrics(_series=self._s, _agent=agent_id)

    @property
    def by_agent(self) -> bool:
        return self._s.by_agent

    @property
    def last_llm(self) -> LastCall | None:
        return self._s.last_llm

    @last_llm.setter
    def last_llm(self, value: LastCall | None) -> None:
        self._s.last_llm = value

    def llm_fallback(self, from_model: str, to_model: str) -> None:
        self._s.fallbacks.labels(from_model, to_model).inc()

    def message_in(self, channel: str) -> None:
        self._s.messages_in.labels(*self._a, channel).inc()

    def message_out(self, channel: str) -> None:
        self._s.messages_out.labels(*self._a, channel).inc()

    def outbound(self, msg: object) -> None:
        """A bus observer: error replies count as messages out (text replies are counted by
        the agent loop when it sends them)."""
        if getattr(msg, "kind", None) == "error":
            channel = getattr(getattr(msg, "target", None), "channel", "unknown")
            self._s.messages_out.labels(*self._a, channel).inc()

    def dead_letter(self, channel: str) -> None:
        self._s.dead.labels(channel).inc()

    def observe_turn(self, seconds: float) -> None:
        (self._s.turn.labels(*self._a) if self._a else self._s.turn).observe(seconds)

    def llm_call(self, job: str, status: str, prompt: int = 0, completion: int = 0, cached: int = 0) -> None:
        self._s.llm.labels(*self._a, job, status).inc()
        self.last_llm = LastCall(ok=status == "ok", job=job, at=time.time())
        tokens = self._s.tokens
        if prompt:
            tokens.labels(*self._a, job, "prompt").inc(prompt)
        if completion:
            tokens.labels(*self._a, job, "completion").inc(completion)
        if cached:
            tokens.labels(*self._a, job, "cached").inc(cached)

    def tool_call(self, tool: str, status: str) -> None:
        self._s.tools.labels(*self._a, tool, status).inc()

    def consolidation(self, status: str) -> None:
        self._s.consolidations.labels(*self._a, status).inc()

    def dream_run(self, status: str) -> None:
        self._s.dreams.labels(*self._a, status).inc()

    def _gauge(self, gauge: Gauge) -> Gauge:
        return gauge.labels(*self._a) if self._a else gauge

    def track_queue_depth(self, depth: Callable[[], int]) -> None:
        self._gauge(self._s.queue).set_function(lambda: float(depth()))

    def track_active_turns(self, count: Callable[[], int]) -> None:
        self._gauge(self._s.active).set_function(lambda: float(count()))

    def track_workers(self, sessions: Callable[[], int], lanes: Callable[[], int] | None = None) -> None:
        """Session workers and delivery lanes: after a burst of chats and then quiet, both go back down."""
        self._gauge(self._s.workers).set_function(lambda: float(sessions()))
        if lanes is not None:
            self.track_lanes(lanes)

    def track_lanes(self, lanes: Callable[[], int]) -> None:
        """The bus's delivery lanes (the daemon's, never an agent's)."""
        self._s.lanes.set_function(lambda: float(lanes()))

    def track_turns(self, bus: QueueView, agents: Sequence[tuple[str, str, TurnView]]) -> None:
        """The turn gauges over each agent's (id, stamp on the bus, loop), the default first:
        the whole gateway's with one agent, each agent's under its label with several."""
        if not self.by_agent:
            loop = agents[0][2]
            self.track_queue_depth(lambda: bus.inbound_depth + loop.queued)
            self.track_active_turns(lambda: loop.active_turns)
            self.track_workers(lambda: loop.session_workers, lambda: bus.delivery_lanes)
            return
        self.track_lanes(lambda: bus.delivery_lanes)
        for agent_id, stamp, turns in agents:
            view = self.for_agent(agent_id)
            view.track_queue_depth(partial(_queued, bus, stamp, turns))
            view.track_active_turns(partial(getattr, turns, "active_turns"))
            view.track_workers(partial(getattr, turns, "session_workers"))

    def render(self) -> bytes:
        return generate_latest(self._s.registry)


def _queued(bus: QueueView, stamp: str, turns: TurnView) -> int:
    return bus.inbound_depth_of(stamp) + turns.queued
