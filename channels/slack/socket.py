"""Socket Mode for the Slack channel: connect, stay connected, notice a dead socket.

slack-sdk's aiohttp client carries the websocket, answers Slack's envelopes and pings.
Its own reconnect loop is switched off: it logs an error on every failed attempt and
retries at a fixed interval. This supervisor owns reconnection instead:

* every (re)connection is retried with capped exponential backoff; an outage is logged
  once when it starts and once when it ends; ``start()`` never fails because Slack is
  unreachable;
* a closed socket or failing pings trigger a reconnect at once, and a liveness watchdog
  replaces a socket that has been silent (no event, hello or pong) for ``watchdog_s``.
  Slack's own ``disconnect`` request (a routine refresh) is still handled by the SDK.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import WSMessage
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from lucidgate.config.backoff import backoff_delay


logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0
CONNECT_TIMEOUT_S = 30.0


class SocketSupervisor:
    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        *,
        watchdog_s: float,
        ping_interval_s: float = 10.0,
        backoff_s: float = 1.0,
        logger: logging.Logger | None = None,
    ) -> None:
        self._app = app
        self._app_token = app_token
        self._watchdog_s = watchdog_s
        self._ping_interval_s = ping_interval_s
        self._backoff_s = backoff_s
        self._sdk_logger = logger
        self.handler: AsyncSocketModeHandler | None = None
        self.connected = asyncio.Event()
        self.reconnects = 0  # watchdog-initiated reconnections (tests, metrics)
        self._last_frame = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # The SDK client starts tasks in its constructor: build it on the running loop.
        self.handler = AsyncSocketModeHandler(
            self._app, self._app_token, logger=self._sdk_logger, ping_interval=self._ping_interval_s
        )
        client = self.handler.client
        client.default_auto_reconnect_enabled = False
        client.auto_reconnect_enabled = False
        client.on_message_listeners.append(self._on_frame)
        client.on_close_listeners.append(self._on_close)
        client.on_error_listeners.append(self._on_close)
        self._task = asyncio.create_task(self._run(), name="slack-socket-mode")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.handler is not None:
            try:
                await self.handler.close_async()
            except Exception as exc:  # closing a broken socket must not break shutdown
                logger.debug("closing the Slack socket failed: %s", type(exc).__name__)
            self.handler = None
        self.connected.clear()

    async def _on_frame(self, _message: WSMessage) -> None:
        self._last_frame = time.time()

    async def _on_close(self, _message: WSMessage) -> None:
        self._wake.set()  # let the watcher look now rather than at its next tick

    def idle_s(self) -> float:
        """Seconds since the last sign of life (a text frame or a pong)."""
        assert self.handler is not None
        pong = self.handler.client.last_ping_pong_time or 0.0
        return time.time() - max(self._last_frame, pong)

    async def _run(self) -> None:
        failures = 0
        outage_since: float | None = None
        force = True
        while True:
            try:
                await self._connect(force=force)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if outage_since is None:
                    outage_since = time.monotonic()
                    logger.warning(
                        "Slack Socket Mode is unreachable (%s); retrying with backoff", _describe(exc)
                    )
                else:
                    logger.debug("Slack Socket Mode still unreachable: %s", _describe(exc))
                failures += 1
                await asyncio.sleep(backoff_delay(failures, self._backoff_s, MAX_BACKOFF_S))
                continue
            if outage_since is not None:
                logger.info("Slack Socket Mode connected again after %.0fs", time.monotonic() - outage_since)
                outage_since = None
            else:
                logger.info("Slack Socket Mode connected")
            failures = 0
            self.connected.set()
            force = await self._watch()
            self.connected.clear()
            self.reconnects += 1

    async def _connect(self, *, force: bool) -> None:
        assert self.handler is not None
        client = self.handler.client
        lock = client.connect_operation_lock  # shared with the SDK's "disconnect" handling

        # The SDK's connect() retries a failing websocket forever: bound it, then back off.
        # (asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.)
        async with asyncio.timeout(CONNECT_TIMEOUT_S), lock:
            if not force and await client.is_connected():
                return  # the SDK already replaced the socket (Slack's "disconnect")
            # Our own call, not the SDK's issue_new_wss_url(), which logs every failure.
            response = await client.web_client.apps_connections_open(app_token=self._app_token)
            client.wss_uri = str(response["url"])
            await client.connect()
        self._last_frame = time.time()
        client.last_ping_pong_time = None

    async def _watch(self) -> bool:
        """Return when the socket is closed (False) or failing or silent too long (True:
        replace it even if it looks open)."""
        assert self.handler is not None
        client = self.handler.client
        interval = max(0.05, min(self._watchdog_s / 4, 1.0))
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
            except TimeoutError:
                pass
            self._wake.clear()
            session = client.current_session
            if session is None or session.closed:
                logger.info("the Slack socket was closed; reconnecting")
                return False
            if await client.is_ping_pong_failing():
                logger.warning("Slack stopped answering pings; reconnecting")
                return True
            idle = self.idle_s()
            if idle >= self._watchdog_s:
                logger.warning("no events or pings from Slack for %.1fs; reconnecting", idle)
                return True


def _describe(exc: BaseException) -> str:
    """A short, token-free description (SDK errors carry the whole response)."""
    response: Any = getattr(exc, "response", None)
    if response is not None and hasattr(response, "get"):
        try:
            return f"{type(exc).__name__}: {response.get('error')}"
        except Exception:
            pass
    return type(exc).__name__ if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
