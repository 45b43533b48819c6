"""The running gateway: its components started in order and stopped in reverse, draining, readiness.

``build_gateway`` (gateway/app.py), the composition root, builds every part and registers
each one that has a life as a component (gateway/lifecycle.py), in dependency order:

    workspace → history → usage → tokenizer → provider (model client) → bus → channels →
    outbound flush → memory commits → mcp → recall index → approvals → agent → scheduler

``Gateway`` starts them in that order and stops them in reverse through one loop each way,
after closing intake; a failure while starting stops exactly what had started and re-raises,
and one channel refusing is logged, marked failed and leaves the others serving
(``Lifecycle``). The agent's stop gives running turns the grace period (``Grace``).

Callers use the few methods below (start/stop, drain, readiness, routers, channel look-up).
``parts`` is the root's record of what it built, by name, for tests; production code takes
what it needs from the root instead (``http`` for the daemon's HTTP app).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from lucidgate.channels.base import Channel, HasRouter
from lucidgate.channels.bus import MessageBus
from lucidgate.config.schema import Config
from lucidgate.gateway.agent.commands import CommandRegistry
from lucidgate.gateway.agent.context import ContextBuilder
from lucidgate.gateway.agent.loop import AgentLoop
from lucidgate.gateway.agent.roles import OwnerSessions
from lucidgate.gateway.components import Grace
from lucidgate.gateway.lifecycle import Lifecycle, Registered
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.gateway.model.usage import UsageLedger
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.dream import Dream
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.sessions import SessionStore
from lucidgate.memory.store import MemoryStore

if TYPE_CHECKING:
    from fastapi import APIRouter
    from lucidgate.channels.cli import CliChannel
    from lucidgate.channels.deps import ChannelDeps
    from lucidgate.gateway.approvals import Approvals
    from lucidgate.gateway.mcp import McpManager
    from lucidgate.gateway.agent.memory_commits import MemoryCommitter
    from lucidgate.memory.search.service import RecallService
    from lucidgate.scheduler import SchedulerService

logger = logging.getLogger(__name__)


@runtime_checkable
class Drainable(Protocol):
    """A channel that has work to finish when the gateway drains (answer waiting clients)."""

    async def drain(self) -> None: ...


@dataclass(frozen=True, slots=True)
class GatewayParts:
    """Everything ``build_gateway`` wired, by name: the root's record, read by tests. Never
    handed to a command, a route or the HTTP app (they get only the parts they use)."""

    config: Config
    bus: MessageBus
    sessions: SessionStore
    store: MemoryStore
    git: GitStore
    model: LiteLLMChatModel
    builder: ContextBuilder
    tools: ToolRegistry
    consolidator: Consolidator
    dream: Dream
    agent: AgentLoop
    commands: CommandRegistry
    usage: UsageLedger
    metrics: Metrics
    owner_sessions: OwnerSessions
    scheduler: SchedulerService
    mcp: McpManager | None = None  # MCP servers' tools (tools.mcpServers)
    committer: MemoryCommitter | None = None  # agent: / manual: memory commits
    recall: RecallService | None = None
    approvals: Approvals | None = None  # owner-power actions held for the owner


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    """What the web console's routes read, chosen by the root (``mount_console`` hands each
    route module its share)."""

    config: Config
    commands: CommandRegistry
    sessions: SessionStore
    store: MemoryStore
    git: GitStore
    dream: Dream
    usage: UsageLedger
    bus: MessageBus
    model: LiteLLMChatModel
    agent: AgentLoop
    scheduler: SchedulerService
    recall: RecallService | None
    approvals: Approvals | None
    stamp: str = ""  # the agent's id as its messages and session keys carry it ("": the default agent)


class ConsoleAgents:
    """Every agent's ``ConsoleParts`` by id, the default agent first: the console serves each
    agent from its own parts (``?agent=<id>``), and only from those."""

    def __init__(self, by_id: Mapping[str, ConsoleParts]) -> None:
        if not by_id:
            raise ValueError("the console needs at least the default agent's parts")
        self.by_id: Mapping[str, ConsoleParts] = MappingProxyType(dict(by_id))

    @property
    def default(self) -> ConsoleParts:
        return next(iter(self.by_id.values()))

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self.by_id)


@dataclass(frozen=True, slots=True)
class HttpParts:
    """What the daemon's HTTP app (gateway/daemon/server.py) uses besides the gateway itself,
    built by the root: the terminal channel behind the local API, and the parts its own routes
    read (readiness adds the last model call, the local search uses the warm recall index)."""

    config: Config
    metrics: Metrics
    model: LiteLLMChatModel
    recall: RecallService | None
    cli: CliChannel
    console: ConsoleAgents


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str


class Gateway:
    """An async context manager around the registered components: started in order, stopped
    in reverse."""

    def __init__(self, parts: GatewayParts, components: Lifecycle, grace: Grace, *,
                 http: HttpParts | None = None, channel_deps: ChannelDeps,
                 agents: Mapping[str, GatewayParts] | None = None) -> None:
        self.parts = parts  # the default agent's
        # Every agent's parts by id, the default first (one entry without ``agents.list``).
        self.agents: Mapping[str, GatewayParts] = MappingProxyType(dict(agents or {"default": parts}))
        self._loops = [p.agent for p in self.agents.values()]
        self.http = http  # None for a gateway built without the HTTP surfaces
        # What the root built its channels with; a channel added before start (a test's, a
        # benchmark's) is built with the same, so it shares the bus and the pairing store.
        self.channel_deps = channel_deps
        self._bus, self._config = parts.bus, parts.config
        self._mcp, self._metrics = parts.mcp, parts.metrics
        self._components = components
        self._grace = grace
        self._running = False
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None
        self._skip_grace = asyncio.Event()
        self.started = asyncio.Event()

    # -- channels ------------------------------------------------------------------------------
    def add_channel(self, name: str, channel: Channel) -> None:
        """Attach a channel before ``start`` (tests' fakes, benchmarks' stand-ins)."""
        if self._running or self.started.is_set():
            raise RuntimeError("channels are added before the gateway starts")
        self._components.add_to("channels", name, channel)

    def channel(self, name: str) -> Channel | None:
        return self.channels.get(name)

    @property
    def channels(self) -> Mapping[str, Channel]:
        return MappingProxyType(cast(dict[str, Channel], self._components.members("channels")))

    @property
    def failed_channels(self) -> Mapping[str, str]:
        """Channels that refused to start, with the reason (shown by /status and the console)."""
        return MappingProxyType(self._components.failed)

    @property
    def components(self) -> tuple[Registered, ...]:
        """The registered components in start order: each one's name, the part, and whether it
        may refuse to start (a channel)."""
        return tuple(self._components)

    def routers(self) -> list[APIRouter]:
        """The HTTP routes of channels that receive platform events over HTTP."""
        return [ch.router() for ch in self.channels.values() if isinstance(ch, HasRouter)]

    # -- life ----------------------------------------------------------------------------------
    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._running or self.started.is_set():
            raise RuntimeError("the gateway is already started")
        self._running = True
        try:
            await self._components.start(on_failure=self._abandon)
        except BaseException:
            self._running = False
            raise
        _freeze_startup_heap()
        self.started.set()
        logger.info("gateway started: workspace %s, model %s", self._config.workspace, self._config.agent.model)

    def _abandon(self) -> None:
        """A start failed: no message is taken and no turn waits while what started stops."""
        logger.error("the gateway failed to start; stopping what did start")
        self._bus.close_intake()
        self._grace.seconds = 0

    async def stop(self, grace_s: float | None = None) -> None:
        """Close intake, then stop the components in reverse; turns get ``grace_s`` to finish.
        Idempotent."""
        if not self._running:
            return
        self._running = False
        self._grace.seconds = self._config.gateway.shutdown_grace_s if grace_s is None else grace_s
        # Intake first: channels see BusClosed and leave platform messages unacked.
        self._bus.close_intake()
        await self._components.stop()

    # -- drain (SIGTERM) -------------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self._draining

    async def drain(self, grace_s: float) -> None:
        """Stop intake, finish turns within ``grace_s``, answer waiting clients. Idempotent."""
        if self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain(grace_s), name="gateway-drain")
        await asyncio.shield(self._drain_task)

    def skip_grace(self) -> None:
        """A second signal: stop waiting for turns; they stay pending and resume at next start."""
        self._skip_grace.set()

    def _busy(self) -> int:
        return sum(loop.active_turns + loop.queued for loop in self._loops) + self._bus.inbound_depth

    async def _drain(self, grace_s: float) -> None:
        self._draining = True
        self._bus.close_intake()
        busy = self._busy()
        if busy:
            logger.info("draining: no new messages; waiting up to %gs for %d turn(s)", grace_s, busy)
        quiet = asyncio.create_task(self._quiesce(), name="gateway-quiesce")
        skip = asyncio.create_task(self._skip_grace.wait(), name="gateway-skip-grace")
        done, _ = await asyncio.wait({quiet, skip}, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
        for task in (quiet, skip):
            task.cancel()
        await asyncio.gather(quiet, skip, return_exceptions=True)
        if quiet not in done:
            why = "grace period skipped" if skip in done else "grace period over"
            logger.warning("%s with %d turn(s) unfinished; they stay pending and resume at the next start",
                           why, self._busy())
        for name, channel in self.channels.items():
            if isinstance(channel, Drainable):
                try:
                    await asyncio.wait_for(channel.drain(), timeout=max(1.0, grace_s))
                except Exception:
                    logger.exception("draining channel %s failed", name)

    async def _quiesce(self) -> None:
        for loop in self._loops:
            await loop.idle()
        await self._bus.flush_outbound()

    # -- health --------------------------------------------------------------------------------
    async def readiness(self) -> dict[str, Check]:
        """What /readyz reports: every component that runs, asked whether it is alive (the
        bus accepting, the agent loop's tasks running, the workspace writable, a model
        configured, ...). A drain closes intake first, so the bus reports "shutting down"."""
        return {name: Check(ok, detail) for name, (ok, detail) in (await self._components.checks()).items()}

    def optional_checks(self) -> dict[str, Check]:
        """What /readyz reports without gating on it: each MCP server's state."""
        if self._mcp is None:
            return {}
        return {f"mcp {s.name}": Check(s.state == "connected", s.describe()) for s in self._mcp.status()}

    def metrics_text(self) -> tuple[bytes, str]:
        """Prometheus text and its content type."""
        return self._metrics.render(), self._metrics.content_type


_heap_frozen = False


def _freeze_startup_heap() -> None:
    """Move everything alive after start-up out of the cyclic collector's sight, once per process.

    Importing litellm leaves ~300,000 long-lived objects; every full collection walks all of
    them, which took ~120 ms with the whole interpreter stopped, an event-loop stall at a
    random turn. Start-up objects (modules, classes, the model cost map) live until exit, so
    there is nothing for the collector to find among them. No ``gc.collect()`` first: that
    would be the same stall; the little garbage alive now simply stays. Once, so a process
    that starts gateways repeatedly (the tests) does not keep each start's garbage forever.
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True
