"""Serve an ASGI app over real HTTP on a loopback port for the length of a test.

Routes are exercised the way a platform reaches them — through uvicorn's HTTP parser, with
real chunked bodies, connection handling and content lengths — not by calling the app in
process (``httpx.ASGITransport`` skips all of that, so a body cap can pass there and fail
behind uvicorn).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn


@asynccontextmanager
async def served(app: Any, *, lifespan: str = "off") -> AsyncIterator[str]:
    """``http://127.0.0.1:<port>`` of ``app`` served by uvicorn until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan, access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():  # start-up failed: surface its error
                await task
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


@asynccontextmanager
async def served_client(app: Any, *, lifespan: str = "off", **client_args: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client whose base URL is ``app`` served over loopback HTTP."""
    async with served(app, lifespan=lifespan) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30, **client_args) as client:
            yield client
