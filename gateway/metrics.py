"""Prometheus metrics for one gateway (its own registry: no globals, tests don't collide).

Besides our counters the registry carries the process collector (``process_*``: memory,
CPU, open files, start time) and ``lucid_build_info``. Counters do not export the
``_created`` series: a per-series timestamp that doubles the output and that no
dashboard here uses. The model's last call result is kept for ``/readyz``.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

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


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._in = Counter("lucid_messages_in", "Inbound messages by channel", ["channel"], registry=r)
        self._out = Counter("lucid_messages_out", "Outbound replies by channel", ["channel"], registry=r)
        self._turn = Histogram("lucid_turn_seconds", "Turn latency", buckets=TURN_BUCKETS, registry=r)
        self._llm = Counter("lucid_llm_calls", "LLM calls by job and status", ["job", "status"], registry=r)
        self._tokens = Counter("lucid_llm_tokens", "LLM tokens by job and kind", ["job", "kind"], registry=r)
        self._tools = Counter("lucid_tool_calls", "Tool calls by tool and status", ["tool", "status"], registry=r)
        self._consolidations = Counter("lucid_consolidations", "Consolidation rounds", ["status"], registry=r)
        self._dreams = Counter("lucid_dream_runs", "Dream runs", ["status"], registry=r)
        self._queue = Gauge("lucid_inbound_queue_depth", "Messages waiting on the bus", registry=r)
        self._active = Gauge("lucid_active_turns", "Turns running now", registry=r)
        self._workers = Gauge("lucid_session_workers", "Session worker tasks alive (idle ones retire)",
                              registry=r)
        self._lanes = Gauge("lucid_delivery_lanes", "Delivery lane tasks alive (idle ones retire)", registry=r)
        ProcessCollector(registry=r)
        Info("lucid_build", "lucidgate build", registry=r).info(
            {"version": __version__, "python": platform.python_version()})
        self.last_llm: LastCall | None = None
        self._dead = Counter("lucid_outbox_dead_letters", "Outbound items given up, by channel", ["channel"],
                             registry=r)
        # Here, not in each model chain: every agent's chain counts into the one series.
        self._fallbacks = Counter("lucid_llm_fallbacks", "Switches to a fallback model",
                                  ["from_model", "to_model"], registry=r)

    def llm_fallback(self, from_model: str, to_model: str) -> None:
        self._fallbacks.labels(from_model, to_model).inc()

    def message_in(self, channel: str) -> None:
        self._in.labels(channel).inc()

    def message_out(self, channel: str) -> None:
        self._out.labels(channel).inc()

    def outbound(self, msg: object) -> None:
        """A bus observer: error replies count as messages out (text replies are counted by
        the agent loop when it sends them)."""
        if getattr(msg, "kind", None) == "error":
            channel = getattr(getattr(msg, "target", None), "channel", "unknown")
            self._out.labels(channel).inc()
    def dead_letter(self, channel: str) -> None:
        self._dead.labels(channel).inc()

    def observe_turn(self, seconds: float) -> None:
        self._turn.observe(seconds)

    def llm_call(self, job: str, status: str, prompt: int = 0, completion: int = 0, cached: int = 0) -> None:
        self._llm.labels(job, status).inc()
        self.last_llm = LastCall(ok=status == "ok", job=job, at=time.time())
        if prompt:
            self._tokens.labels(job, "prompt").inc(prompt)
        if completion:
            self._tokens.labels(job, "completion").inc(completion)
        if cached:
            self._tokens.labels(job, "cached").inc(cached)

    def tool_call(self, tool: str, status: str) -> None:
        self._tools.labels(tool, status).inc()

    def consolidation(self, status: str) -> None:
        self._consolidations.labels(status).inc()

    def dream_run(self, status: str) -> None:
        self._dreams.labels(status).inc()

    def track_queue_depth(self, depth: Callable[[], int]) -> None:
        self._queue.set_function(lambda: float(depth()))

    def track_active_turns(self, count: Callable[[], int]) -> None:
        self._active.set_function(lambda: float(count()))

    def track_workers(self, sessions: Callable[[], int], lanes: Callable[[], int]) -> None:
        """Session workers and delivery lanes: after a burst of chats and then quiet, both go back down."""
        self._workers.set_function(lambda: float(sessions()))
        self._lanes.set_function(lambda: float(lanes()))

    def render(self) -> bytes:
        return generate_latest(self.registry)
