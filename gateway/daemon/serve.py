"""Running the gateway on uvicorn, with our own signal handling and a workspace lock.

uvicorn's own handling of SIGTERM/SIGINT stops the server at once and then re-raises the
signal, so the process dies by signal and queued work is dropped (DESIGN §11). Here the
server's signal capture is switched off and our handlers drain first:

1. first SIGTERM/SIGINT/SIGHUP: ``GatewayState.drain`` — new messages get 503, running turns
   finish within ``gateway.shutdownGraceS``, answers are delivered, waiting clients are
   answered; then uvicorn is told to exit, the lifespan stops the gateway, exit code 0;
2. a second signal skips what is left of the grace period (those turns stay pending in
   their transcripts and resume at the next start);
3. a third one makes uvicorn stop without waiting for open connections.

Under systemd (``Type=notify``) the server tells systemd it is ready once channels and the
scheduler run, keeps a ``STATUS=`` line current, says ``STOPPING=1`` when it drains, and
pings the watchdog from a task on this event loop (``gateway.daemon.sdnotify``).

One gateway per workspace: ``workspace/gateway.lock`` is held with ``flock`` for the life
of the process (the kernel releases it if the process dies), and holds its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from lucidgate.config.errors import LucidError
from lucidgate.config.schema import Config
from lucidgate.gateway.daemon import local_client
from lucidgate.gateway.daemon.urls import local_url
from lucidgate.gateway.daemon.sdnotify import Notifier
from lucidgate.gateway.daemon.workspace_lock import (  # noqa: F401  (GatewayLocked, WorkspaceLock re-exported)
    GatewayLocked, WorkspaceLock, WorkspaceLocks, gateway_workspaces)
from lucidgate.gateway.daemon.server import GatewayState, create_app

logger = logging.getLogger(__name__)

# SIGHUP (a closed terminal, `systemctl kill -s HUP`, a reload) drains like SIGTERM: a
# reload of the config needs a restart anyway, and dying mid-turn loses nothing but time.
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

# After the drain, uvicorn waits this long for open connections before cancelling them.
CONNECTION_CLOSE_S = 5


class ListenError(LucidError):
    """The configured host/port cannot be bound."""


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen before the gateway starts, so a busy port fails fast and clearly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted connections only when
    # the socket says it is TCP; without it every response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); is another program "
                          "using it? Set gateway.port (or --port)") from None
    sock.setblocking(False)
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal capture (it would re-raise the signal after shutdown)."""

    startup_failed = False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        except SystemExit:  # uvicorn exits the process when the lifespan fails; we return 1
            self.startup_failed = True
            self.should_exit = True


class GatewayServer:
    """One gateway on one socket. ``await serve()`` runs it until a shutdown completes.

    Also an async context manager (tests, benchmarks): entering starts serving in a task
    and returns once the gateway is up; leaving shuts down exactly like SIGTERM does.
    """

    def __init__(self, config: Config, *, app: Any = None, sock: socket.socket | None = None,
                 install_signals: bool = False, access_log: bool = True,
                 notifier: Notifier | None = None) -> None:
        self.config = config
        self.notifier = notifier or Notifier({})
        self.app = app if app is not None else create_app(config)
        self.state: GatewayState = self.app.state.lucid
        self.sock = sock or bind_socket(config.gateway.host, config.gateway.port)
        host, port = self.sock.getsockname()[:2]
        self._url = local_url(host, port)
        self._install_signals = install_signals
        self.server = _Uvicorn(uvicorn.Config(
            self.app, log_config=None, access_log=access_log, lifespan="on", proxy_headers=False,
            server_header=False, timeout_graceful_shutdown=CONNECTION_CLOSE_S, ws="none",
        ))
        self._signals = 0
        self._drainer: asyncio.Task[None] | None = None
        self._task: asyncio.Task[int] | None = None

    @property
    def url(self) -> str:
        return self._url

    async def serve(self) -> int:
        """Run until shut down. 0 after a clean shutdown, 1 when the gateway failed to start."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if self._install_signals:
            for sig in SHUTDOWN_SIGNALS:
                loop.add_signal_handler(sig, self.request_shutdown, sig.name)
                installed.append(sig)
        self.notifier.status("starting")
        systemd = loop.create_task(self._tell_systemd(), name="gateway-sdnotify")
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            systemd.cancel()
            for sig in installed:
                loop.remove_signal_handler(sig)
            if self._drainer is not None:
                await asyncio.gather(self._drainer, return_exceptions=True)
            self.sock.close()
            self.notifier.close()
        return 1 if self.server.startup_failed else 0

    async def _tell_systemd(self) -> None:
        """READY=1 once the gateway runs, then the watchdog pings until cancelled."""
        await self.state.started.wait()
        gw = self.state.gateway
        channels = sorted(name for name in gw.channels if name != "cli")
        failed = sorted(gw.failed_channels)
        status = f"{len(channels)} channel(s) up: {', '.join(channels) or 'none'}; scheduler running"
        if failed:
            status += f"; failed: {', '.join(failed)}"
        self.notifier.ready(status)
        await self.notifier.watchdog()

    def request_shutdown(self, reason: str = "shutdown") -> None:
        """What SIGTERM/SIGINT do; safe to call repeatedly (each call escalates)."""
        self._signals += 1
        if self._signals == 1:
            grace = self.config.gateway.shutdown_grace_s
            logger.info("%s: shutting down gracefully (up to %gs for running turns)", reason, grace)
            self.notifier.stopping(f"draining ({reason}): up to {grace:g}s for running turns")
            self._drainer = asyncio.get_running_loop().create_task(self._drain_then_exit(grace),
                                                                   name="gateway-shutdown")
        elif self._signals == 2:
            logger.warning("%s again: not waiting for running turns; they resume at the next start", reason)
            self.state.skip_grace()
        else:
            logger.warning("%s a third time: closing connections now", reason)
            self.server.force_exit = True
            self.server.should_exit = True

    async def _drain_then_exit(self, grace: float) -> None:
        try:
            await self.state.drain(grace)
        finally:
            self.server.should_exit = True

    # -- in-process use ------------------------------------------------------------------------
    async def __aenter__(self) -> GatewayServer:
        self._task = asyncio.create_task(self.serve(), name="gateway-server")
        started = asyncio.create_task(self.state.started.wait())
        done, _ = await asyncio.wait({self._task, started}, return_when=asyncio.FIRST_COMPLETED)
        if started not in done:
            started.cancel()
            code = self._task.result()
            raise RuntimeError(f"the gateway did not start (exit code {code})")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def shutdown(self) -> int:
        if self._task is None:
            return 0
        if not self._task.done() and self._signals == 0:
            self.request_shutdown("stop requested")
        return await self._task


def run_gateway(config: Config, *, on_listening: Callable[[str], None] | None = None,
                access_log: bool = True) -> int:
    """The ``lucid gateway`` process: lock the workspaces (every agent's), bind, serve until a
    signal. Exit code."""
    with WorkspaceLocks(gateway_workspaces(config), "gateway"):
        sock = bind_socket(config.gateway.host, config.gateway.port)
        return asyncio.run(_main(config, sock, on_listening, access_log))


async def _main(config: Config, sock: socket.socket, on_listening: Callable[[str], None] | None,
                access_log: bool) -> int:
    server = GatewayServer(config, sock=sock, install_signals=True, access_log=access_log,
                           notifier=Notifier())

    async def announce() -> None:
        await server.state.started.wait()
        await asyncio.to_thread(local_client.publish, config.workspace, server.url, server.state.local_token)
        if on_listening is not None:
            on_listening(server.url)

    announcer = asyncio.create_task(announce(), name="gateway-announce")
    try:
        return await server.serve()
    finally:
        announcer.cancel()
        local_client.withdraw(config.workspace)
