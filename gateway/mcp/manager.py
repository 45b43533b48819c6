"""The MCP client manager: one supervised connection per configured server.

Each server in ``tools.mcpServers`` gets a supervisor task that connects (stdio, streamable
HTTP or SSE, through the official ``mcp`` SDK), lists the server's tools, registers them as
``mcp_<server>_<tool>`` and then holds the connection open until the gateway stops or the
connection is lost. A server that cannot be reached is logged and retried with exponential
backoff; it never delays the gateway's start (or its readiness), which only spawns the
supervisors. Turns are what wait: ``first_turn_wait`` holds a turn until every server's first
connection attempt has ended — bounded by that server's ``connectTimeoutS`` counted from the
start, servers in parallel — so a one-shot run or the first turn after a restart sees the
tools the user configured. Once a server's first attempt has ended, no turn waits for it again.

The SDK's transports are anyio task groups, whose cancel scopes must be entered and left by
the same task: so the supervisor owns the whole connection, and tool calls (from turn
tasks) only send requests over the session. A call is bounded by ``toolTimeoutS`` and by the
connection itself — when the server dies mid-call, the call ends with a tool error at once
rather than waiting for a reply that will never come, and the supervisor reconnects.

``status()`` is what ``/status`` and ``lucid doctor`` show.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

from lucidgate.config.backoff import backoff_delay
from lucidgate.config.schema import McpServerConfig
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.mcp.tools import McpTool, render_result
from lucidgate.gateway.tools.base import ToolRegistry

logger = logging.getLogger(__name__)

State = Literal["starting", "connected", "retrying", "stopped"]
MAX_ERROR_CHARS = 300
FIRST_ATTEMPT_MARGIN_S = 1.0


@dataclass
class ServerStatus:
    name: str
    transport: str
    state: State = "starting"
    tools: list[str] = field(default_factory=list)
    error: str | None = None
    failures: int = 0
    connects: int = 0
    next_retry_at: float | None = None  # time.monotonic() of the next attempt

    def describe(self) -> str:
        if self.state == "connected":
            return f"{self.name}: connected ({len(self.tools)} tools)"
        if self.state == "retrying":
            wait = max(0.0, (self.next_retry_at or 0.0) - time.monotonic())
            return f"{self.name}: down ({self.error}); retry {self.failures} in {wait:.0f}s"
        return f"{self.name}: {self.state}"


@dataclass
class _Connection:
    session: Any
    lost: asyncio.Event = field(default_factory=asyncio.Event)


def transport_of(cfg: McpServerConfig) -> str:
    if cfg.command:
        return "stdio"
    if cfg.transport == "sse" or (cfg.transport == "auto" and (cfg.url or "").rstrip("/").endswith("/sse")):
        return "sse"
    return "streamableHttp"


class McpManager:
    """Supervises the configured MCP servers and runs their tools for the registry."""

    def __init__(self, servers: dict[str, McpServerConfig], registry: ToolRegistry, *,
                 backoff_base_s: float = 1.0, backoff_max_s: float = 300.0) -> None:
        self._servers = {name: cfg for name, cfg in servers.items() if cfg.enabled}
        self._registry = registry
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._status = {name: ServerStatus(name, transport_of(cfg)) for name, cfg in self._servers.items()}
        self._conns: dict[str, _Connection] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()
        # Set when a server's first connection attempt has ended, whichever way.
        self._first_attempt = {name: asyncio.Event() for name in self._servers}
        self._started_at: float | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Spawn one supervisor per server and return at once."""
        self._stopping = asyncio.Event()
        self._started_at = time.monotonic()
        for name in self._servers:
            self._tasks.append(asyncio.create_task(self._supervise(name), name=f"mcp-{name}"))

    async def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if not self._tasks:
            return
        done, pending = await asyncio.wait(self._tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for status in self._status.values():
            status.state = "stopped"

    # ------------------------------------------------------------------ status
    def status(self) -> list[ServerStatus]:
        return list(self._status.values())

    def status_line(self) -> str | None:
        if not self._status:
            return None
        return "mcp: " + "; ".join(s.describe() for s in self._status.values())

    async def wait_for(self, name: str, states: Iterable[State], timeout: float = 30.0) -> ServerStatus:
        """Wait until server ``name`` reaches one of ``states`` (for tests and ``lucid doctor``)."""
        wanted = set(states)

        async def until() -> ServerStatus:
            while self._status[name].state not in wanted:
                self._changed.clear()
                await self._changed.wait()
            return self._status[name]

        return await asyncio.wait_for(until(), timeout)

    def _set(self, name: str, **changes: Any) -> None:
        status = self._status[name]
        for key, value in changes.items():
            setattr(status, key, value)
        if status.state != "starting":
            self._first_attempt[name].set()
        self._changed.set()

    async def first_turn_wait(self) -> list[str]:
        """Wait until each server's first attempt has ended (at most its ``connectTimeoutS``
        after the start, all servers at once); return the servers that never connected, each
        with the reason, for the turn to say it went without them."""
        if self._started_at is None:
            return []
        pending = [name for name, done in self._first_attempt.items() if not done.is_set()]
        if pending:
            await asyncio.gather(*(self._await_first_attempt(name) for name in pending))
        return [f"MCP server {status.name!r} ({status.error or 'still starting'})"
                for status in self._status.values() if status.connects == 0]

    async def _await_first_attempt(self, name: str) -> None:
        assert self._started_at is not None
        # The attempt itself is bounded by connectTimeoutS; the margin covers the scheduling
        # between its timeout firing and the supervisor recording it.
        deadline = self._started_at + self._servers[name].connect_timeout_s + FIRST_ATTEMPT_MARGIN_S
        try:
            await asyncio.wait_for(self._first_attempt[name].wait(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            self._first_attempt[name].set()  # never wait for this server again

    # ------------------------------------------------------------------ calls
    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> str:
        """Run one tool; every failure (down, timeout, crash, isError) is a ToolError."""
        cfg = self._servers[server]
        conn = self._conns.get(server)
        if conn is None:
            status = self._status[server]
            why = f" ({status.error})" if status.error else ""
            raise ToolError(f"the MCP server {server!r} is not connected{why}; it is being retried")
        call = asyncio.ensure_future(conn.session.call_tool(tool, arguments or None))
        lost = asyncio.ensure_future(conn.lost.wait())
        try:
            done, _ = await asyncio.wait({call, lost}, timeout=cfg.tool_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not call.done():
                call.cancel()
        if call in done:
            try:
                result = call.result()
            except Exception as exc:
                if _looks_disconnected(exc):
                    conn.lost.set()
                    raise ToolError(f"the MCP server {server!r} went away during {tool}: {_short(exc)}") from exc
                raise ToolError(f"{tool} on MCP server {server!r} failed: {_short(exc)}") from exc
            return render_result(result)
        if conn.lost.is_set():
            raise ToolError(f"the MCP server {server!r} stopped during {tool}; it is being restarted")
        raise ToolError(f"{tool} on MCP server {server!r} did not answer within {cfg.tool_timeout_s:g}s "
                        "(tools.mcpServers.<name>.toolTimeoutS)")

    # ------------------------------------------------------------------ supervision
    async def _supervise(self, name: str) -> None:
        cfg = self._servers[name]
        while not self._stopping.is_set():
            try:
                await self._connect_and_hold(name, cfg)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # ExceptionGroup from the SDK's task groups included
                if self._stopping.is_set():
                    break
                status = self._status[name]
                error = _short(exc)
                logger.warning("MCP server %s: %s", name, error)
                failures = status.failures + 1
                delay = backoff_delay(failures, self._backoff_base_s, self._backoff_max_s)
                self._set(name, state="retrying", error=error, failures=failures,
                          next_retry_at=time.monotonic() + delay)
                try:
                    await asyncio.wait_for(self._stopping.wait(), delay)
                except asyncio.TimeoutError:
                    pass
        self._set(name, state="stopped")

    async def _connect_and_hold(self, name: str, cfg: McpServerConfig) -> None:
        from mcp import ClientSession

        async with AsyncExitStack() as stack:
            async with asyncio.timeout(cfg.connect_timeout_s):
                read, write = await stack.enter_async_context(_transport(cfg))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await _list_tools(session)
            conn = _Connection(session)
            self._register(name, cfg, listed)
            self._conns[name] = conn
            self._set(name, state="connected", error=None, failures=0, next_retry_at=None,
                      connects=self._status[name].connects + 1)
            logger.info("MCP server %s: connected, %d tool(s)", name, len(self._status[name].tools))
            try:
                stop = asyncio.ensure_future(self._stopping.wait())
                lost = asyncio.ensure_future(conn.lost.wait())
                try:
                    await asyncio.wait({stop, lost}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
                    lost.cancel()
            finally:
                self._conns.pop(name, None)
            if conn.lost.is_set() and not self._stopping.is_set():
                raise ConnectionError("the connection was lost")

    def _register(self, name: str, cfg: McpServerConfig, listed: list[Any]) -> None:
        wanted = set(cfg.enabled_tools)
        read_only = set(cfg.read_only_tools)
        tools = [McpTool(self, name, t.name, t.description, t.input_schema, read_only=t.name in read_only)
                 for t in listed if "*" in wanted or t.name in wanted]
        for old in self._status[name].tools:
            if old not in {t.name for t in tools}:
                self._registry.unregister(old)
        for tool in tools:
            self._registry.register(tool)
        self._status[name].tools = [t.name for t in tools]


def _transport(cfg: McpServerConfig) -> Any:
    kind = transport_of(cfg)
    if kind == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert cfg.command is not None
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None,
                                       cwd=cfg.cwd)
        return stdio_client(params)
    assert cfg.url is not None
    if kind == "sse":
        from mcp.client.sse import sse_client

        return sse_client(cfg.url, headers=dict(cfg.headers) or None)
    from mcp.client.streamable_http import streamable_http_client

    if cfg.headers:
        from mcp.shared._httpx_utils import create_mcp_http_client

        return _owning(create_mcp_http_client(headers=dict(cfg.headers)), cfg.url)
    return streamable_http_client(cfg.url)


def _owning(client: Any, url: str) -> Any:
    """streamable_http_client with our own HTTP client (for headers), closed with it."""
    from contextlib import asynccontextmanager

    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def ctx() -> Any:
        async with client, streamable_http_client(url, http_client=client) as streams:
            yield streams

    return ctx()


async def _list_tools(session: Any) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(100):  # a server whose pagination never ends must not hang the start
        if cursor:
            from mcp.types import PaginatedRequestParams

            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        else:
            result = await session.list_tools()
        tools.extend(result.tools)
        cursor = getattr(result, "next_cursor", None)
        if not cursor:
            break
    return tools


def _looks_disconnected(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(word in text for word in ("closed", "connection", "brokenresource", "endofstream"))


def _short(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:MAX_ERROR_CHARS]


async def probe(servers: dict[str, McpServerConfig], timeout_s: float = 20.0) -> list[ServerStatus]:
    """Connect to each enabled server once, concurrently, and report (for ``lucid doctor``)."""
    registry = ToolRegistry()
    manager = McpManager(servers, registry, backoff_base_s=3600.0)
    await manager.start()
    try:
        waits = [manager.wait_for(name, ("connected", "retrying"), timeout_s) for name in manager._servers]
        results = await asyncio.gather(*waits, return_exceptions=True)
        for name, result in zip(manager._servers, results):
            if isinstance(result, BaseException):
                manager._set(name, state="retrying", error=f"no answer within {timeout_s:g}s")
        return [ServerStatus(**vars(s)) for s in manager.status()]
    finally:
        await manager.stop()
