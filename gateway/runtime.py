"""The running gateway: its parts, and starting, draining and stopping them in order.

``build_gateway`` (gateway/app.py) wires a ``GatewayParts``; ``Gateway`` owns their life:

    start:  workspace → git → model client → bus → channels → agent loop → scheduler
    stop:   close intake, then the reverse of start: scheduler → agent (finish turns within
            the grace period) → flush replies → channels → bus → model client

Start runs under an ``AsyncExitStack``: every step that succeeds pushes its own undo, so a
failure at any later step stops exactly what already started, in reverse order, and
re-raises. A channel is the one exception: one platform refusing (a bad token, a network
error) is logged, that channel is stopped and marked failed, and the others keep serving.

Callers use the few methods below (start/stop, drain, readiness, routers, channel look-up);
the parts themselves are in ``parts`` for the wiring (``build_gateway`` hands each command and
``mount_console`` each route only the parts it uses) and for tests.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import tempfile
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from lucidgate.channels.base import Channel, HasRouter
from lucidgate.channels.bus import MessageBus
from lucidgate.config.schema import Config
from lucidgate.gateway.agent.commands import CommandRegistry
from lucidgate.gateway.agent.context import ContextBuilder
from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.gateway.agent.loop import AgentLoop
from lucidgate.gateway.metrics import Metrics
from lucidgate.gateway.agent.roles import OwnerSessions
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.model.usage import UsageLedger
from lucidgate.memory import tokens
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.dream import Dream
from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.sessions import SessionStore
from lucidgate.memory.store import MemoryStore

if TYPE_CHECKING:
    from fastapi import APIRouter
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
    """Everything ``build_gateway`` wired, by name. Read by the wiring and by tests; never handed
    whole to a command or a route."""

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
class Check:
    ok: bool
    detail: str


class Gateway:
    """An async context manager around the wired parts: started in order, stopped in reverse."""

    def __init__(self, parts: GatewayParts, channels: Mapping[str, Channel] | None = None, *,
                 short_lived: bool = False) -> None:
        self.parts = parts
        # A short-lived process (``lucid agent``) loads the tokenizer when a count needs it,
        # not at start: most of its turns never count (``memory.tokens.fits``).
        self._short_lived = short_lived
        self._channels: dict[str, Channel] = dict(channels or {})
        self._failed: dict[str, str] = {}
        self._stack: AsyncExitStack | None = None
        self._grace_s = parts.config.gateway.shutdown_grace_s
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None
        self._skip_grace = asyncio.Event()
        self.started = asyncio.Event()

    # -- channels ------------------------------------------------------------------------------
    def add_channel(self, name: str, channel: Channel) -> None:
        """Attach a channel before ``start`` (the CLI's terminal, tests' fakes)."""
        if self._stack is not None:
            raise RuntimeError("channels are added before the gateway starts")
        self._channels[name] = channel

    def channel(self, name: str) -> Channel | None:
        return self._channels.get(name)

    @property
    def channels(self) -> Mapping[str, Channel]:
        return MappingProxyType(self._channels)

    @property
    def failed_channels(self) -> Mapping[str, str]:
        """Channels that refused to start, with the reason (shown by /status and /readyz)."""
        return MappingProxyType(self._failed)

    def routers(self) -> list[APIRouter]:
        """The HTTP routes of channels that receive platform events over HTTP."""
        return [ch.router() for ch in self._channels.values() if isinstance(ch, HasRouter)]

    # -- life ----------------------------------------------------------------------------------
    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._stack is not None:
            raise RuntimeError("the gateway is already started")
        p = self.parts
        stack = AsyncExitStack()
        self._stack = stack
        try:
            await asyncio.to_thread(_prepare_workspace, p.config.workspace)
            await asyncio.to_thread(_init_history, p.git)
            if p.committer is not None:
                await p.committer.commit_manual_edits()  # hand edits made while we were down
            # Today's usage journal is read once, the tokenizer loaded once — both in threads,
            # before ready, so no turn loads them on the event loop.
            await p.usage.start()
            stack.push_async_callback(p.usage.aclose)  # after the last turn and settle
            if not self._short_lived:
                await tokens.ready()
            await p.model.start()
            stack.callback(p.model.close)
            stack.push_async_callback(p.model.settle)  # token calibration still counting
            await p.bus.start()
            stack.push_async_callback(p.bus.stop)
            for name, channel in list(self._channels.items()):
                if await self._start_channel(name, channel):
                    stack.push_async_callback(_quietly, channel.stop, name)
            # Replies of the last turns go out before the channels close.
            stack.push_async_callback(_quietly, self._flush_outbound, "outbound flush")
            if p.committer is not None:  # the last turns' commits finish after the agent stops
                stack.push_async_callback(_quietly, p.committer.drain, "memory commits")
            if p.mcp is not None:  # spawns supervisors; turns wait for them, readiness never does
                await p.mcp.start()
                stack.push_async_callback(_quietly, p.mcp.stop, "mcp")
            if p.recall is not None:  # before the agent: it outlives every turn
                await p.recall.start()
                stack.push_async_callback(_quietly, p.recall.stop, "recall index")
            if p.approvals is not None:  # before the agent: a resumed turn may hold an action
                await p.approvals.start()
                stack.push_async_callback(_quietly, p.approvals.stop, "approvals")
            await p.agent.start()
            stack.push_async_callback(self._stop_agent)
            await p.scheduler.start()
            stack.push_async_callback(_quietly, p.scheduler.stop, "scheduler")
        except BaseException:
            logger.error("the gateway failed to start; stopping what did start")
            self._stack = None
            p.bus.close_intake()
            self._grace_s = 0
            await stack.aclose()
            raise
        _freeze_startup_heap()
        self.started.set()
        logger.info("gateway started: workspace %s, model %s", p.config.workspace, p.config.agent.model)

    async def _start_channel(self, name: str, channel: Channel) -> bool:
        try:
            await channel.start()
        except Exception as exc:  # one platform's refusal must not take the others down
            logger.error("%s: failed to start (%s) — disabled", name, exc)
            await _quietly(channel.stop, name)
            del self._channels[name]
            self._failed[name] = str(exc)
            return False
        return True

    async def _stop_agent(self) -> None:
        await self.parts.agent.stop(self._grace_s)

    async def _flush_outbound(self) -> None:
        await asyncio.wait_for(self.parts.bus.flush_outbound(), 15)

    async def stop(self, grace_s: float | None = None) -> None:
        """Close intake, then undo start in reverse; turns get ``grace_s`` to finish. Idempotent."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        self._grace_s = self.parts.config.gateway.shutdown_grace_s if grace_s is None else grace_s
        # Intake first: channels see BusClosed and leave platform messages unacked.
        self.parts.bus.close_intake()
        await stack.aclose()

    # -- drain (SIGTERM) -------------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def accepting(self) -> bool:
        return self.started.is_set() and self.parts.bus.accepting and not self._draining

    async def drain(self, grace_s: float) -> None:
        """Stop intake, finish turns within ``grace_s``, answer waiting clients. Idempotent."""
        if self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain(grace_s), name="gateway-drain")
        await asyncio.shield(self._drain_task)

    def skip_grace(self) -> None:
        """A second signal: stop waiting for turns; they stay pending and resume at next start."""
        self._skip_grace.set()

    def _busy(self) -> int:
        p = self.parts
        return p.agent.active_turns + p.agent.queued + p.bus.inbound_depth

    async def _drain(self, grace_s: float) -> None:
        self._draining = True
        self.parts.bus.close_intake()
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
        for name, channel in self._channels.items():
            if isinstance(channel, Drainable):
                try:
                    await asyncio.wait_for(channel.drain(), timeout=max(1.0, grace_s))
                except Exception:
                    logger.exception("draining channel %s failed", name)

    async def _quiesce(self) -> None:
        await self.parts.agent.idle()
        await self.parts.bus.flush_outbound()

    # -- health --------------------------------------------------------------------------------
    async def readiness(self) -> dict[str, Check]:
        """What /readyz reports: intake, the agent loop's tasks alive, a writable workspace, a
        configured model."""
        p = self.parts
        bus_detail = "accepting messages" if self.accepting else (
            "shutting down" if self._draining or not p.bus.accepting else "starting")
        writable, ws_detail = await asyncio.to_thread(_workspace_writable, p.config.workspace)
        ok, why = p.model.configured()
        agent_ok, agent_detail = p.agent.alive()
        return {
            "bus": Check(self.accepting, bus_detail),
            "agent": Check(agent_ok, agent_detail),
            "workspace": Check(writable, ws_detail),
            "provider": Check(ok, p.config.agent.model if ok else why),
        }

    def optional_checks(self) -> dict[str, Check]:
        """What /readyz reports without gating on it: each MCP server's state."""
        mcp = self.parts.mcp
        if mcp is None:
            return {}
        return {f"mcp {s.name}": Check(s.state == "connected", s.describe()) for s in mcp.status()}

    def metrics_text(self) -> tuple[bytes, str]:
        """Prometheus text and its content type."""
        return self.parts.metrics.render(), self.parts.metrics.content_type


def _init_history(git: GitStore) -> None:
    """Create the memory repository, or run without it: a broken history must not keep the
    assistant from answering (the failure is logged and kept for ``lucid doctor``)."""
    try:
        git.init()
    except GitStoreError as exc:
        logger.error("memory versioning failed (%s); running on without it — see `lucid doctor`", exc)


async def _quietly(stop: Any, what: str) -> None:
    try:
        await stop()
    except Exception:
        logger.exception("stopping %s failed", what)


def _prepare_workspace(workspace: Path) -> None:
    from lucidgate.config.onboard import install_templates

    install_templates(workspace)


def _workspace_writable(workspace: Path) -> tuple[bool, str]:
    try:
        fd, path = tempfile.mkstemp(dir=workspace, prefix=".readyz.")
        os.close(fd)
        os.unlink(path)
    except OSError as exc:
        return False, f"{workspace} is not writable ({exc.strerror or exc})"
    return True, str(workspace)


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
