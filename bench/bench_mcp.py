"""MCP client numbers: time from start to connected, and tool-call latency, against the
reference `mcp-server-time` over stdio. Prints the numbers; asserts nothing.

    .venv/bin/python bench/bench_mcp.py [calls]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from lucidgate.config.schema import McpServerConfig
from lucidgate.gateway.mcp import McpManager
from lucidgate.gateway.tools.base import ToolRegistry


async def main(calls: int) -> None:
    registry = ToolRegistry()
    server = McpServerConfig(command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"])
    manager = McpManager({"time": server}, registry)
    started = time.perf_counter()
    await manager.start()
    returned = time.perf_counter() - started
    await manager.wait_for("time", ["connected"], timeout=120)
    connected = time.perf_counter() - started
    latencies = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await manager.call("time", "get_current_time", {"timezone": "Europe/Paris"})
        latencies.append((time.perf_counter() - t0) * 1000)
    await manager.stop()
    latencies.sort()
    print(f"start() returned after        {returned * 1000:8.2f} ms (never waits for a server)")
    print(f"server connected after        {connected * 1000:8.1f} ms (process start + initialize + list)")
    print(f"tool call latency, {calls} calls: median {statistics.median(latencies):.2f} ms, "
          f"p95 {latencies[int(len(latencies) * 0.95) - 1]:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
