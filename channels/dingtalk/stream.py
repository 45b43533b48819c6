"""Stream mode for the DingTalk channel: the SDK's client, and our supervision of its socket.

The official ``dingtalk-stream`` SDK speaks the protocol: ``open_connection`` posts the app's
credentials and subscriptions to ``/v1.0/gateway/connections/open`` and gets an endpoint and a
ticket; frames are parsed into its message types, routed to the registered handlers, and each
is answered with the ACK the SDK builds (``route_message``). Two parts of it do not fit a
daemon, so ``StreamSupervisor`` drives the SDK's pieces instead of calling its ``start()``:

* ``start()`` posts with blocking ``requests`` on the event loop, sleeps a fixed 10 s after a
  failure, logs every failed attempt and leaves its keepalive task running forever. Here the
  connection-open call runs in a thread, failures back off exponentially (an outage is logged
  when it starts and when it ends), and ``stop()`` ends everything;
* a frame is handled in arrival order and ACKed only after the intake has journalled the
  message, so an ACKed message is never lost (DingTalk redelivers an un-ACKed one);
* a liveness watchdog: the socket is pinged every ``ping_interval_s``; one with neither a frame
  nor a pong for ``watchdog_s`` is replaced, as is one DingTalk asks us to leave
  (the SDK's ``disconnect`` system topic).

Where it connects: the SDK reads its OpenAPI root once, at import, from the environment
(``DINGTALK_OPENAPI_ENDPOINT``) into the class constant ``OPEN_CONNECTION_API``, and
``open_connection`` names the class, not ``self``. ``StreamClient.open_connection`` sets that
one constant to ``channels.dingtalk.apiBase`` for the duration of the SDK's own call (under a
lock, so two clients never see each other's root) and puts it back: the narrowest override that
keeps the SDK's request as it writes it. Its ``get_host_ip`` (a UDP "connect" to 8.8.8.8 to learn
the local address it reports) asks the route to the configured root instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from typing import Any
from urllib.parse import quote_plus, urlsplit

import websockets
from dingtalk_stream import Credential, DingTalkStreamClient
from websockets.asyncio.client import ClientConnection

from lucidgate.config.backoff import backoff_delay

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
OPEN_PATH = "/v1.0/gateway/connections/open"
_OPEN_LOCK = threading.Lock()


class StreamClient(DingTalkStreamClient):  # type: ignore[misc]  # the SDK is untyped
    """The SDK's client, with its connection-open request sent to ``api_base``."""

    def __init__(self, client_id: str, client_secret: str, *, api_base: str, sdk_logger: logging.Logger) -> None:
        super().__init__(Credential(client_id, client_secret), logger=sdk_logger)
        self.api_base = api_base.rstrip("/")

    def open_connection(self) -> dict[str, Any] | None:
        """The SDK's own request (blocking: call it in a thread) to this client's root."""
        with _OPEN_LOCK:
            saved = DingTalkStreamClient.OPEN_CONNECTION_API
            DingTalkStreamClient.OPEN_CONNECTION_API = self.api_base + OPEN_PATH
            try:
                found: dict[str, Any] | None = super().open_connection()
            finally:
                DingTalkStreamClient.OPEN_CONNECTION_API = saved
        return found

    def get_host_ip(self) -> str:
        """The local address on the route to the OpenAPI root (no packet is sent)."""
        parts = urlsplit(self.api_base)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((parts.hostname or "127.0.0.1", parts.port or 443))
                return str(probe.getsockname()[0])
        except OSError:
            return ""


class StreamSupervisor:
    """Keeps one Stream-mode socket open and feeds its frames to the SDK's router."""

    def __init__(self, client: StreamClient, *, watchdog_s: float, ping_interval_s: float,
                 backoff_s: float, max_backoff_s: float) -> None:
        self.client = client
        self._watchdog_s = watchdog_s
        self._ping_interval_s = ping_interval_s
        self._backoff = (backoff_s, max_backoff_s)
        self.connected = asyncio.Event()
        self.reconnects = 0  # sockets replaced or lost after they had worked (tests, describe)
        self.stale = 0  # of those, replaced by the watchdog
        self._last_alive = 0.0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.client.pre_start()
        self._task = asyncio.create_task(self._run(), name="dingtalk-stream")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.connected.clear()

    async def _run(self) -> None:
        failures, outage_since = 0, None
        while True:
            try:
                ws = await self._connect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if outage_since is None:
                    outage_since = time.monotonic()
                    logger.warning("DingTalk Stream mode is unreachable (%s); retrying with backoff", _describe(exc))
                else:
                    logger.debug("DingTalk Stream mode still unreachable: %s", _describe(exc))
                failures += 1
                await asyncio.sleep(backoff_delay(failures, *self._backoff))
                continue
            if outage_since is not None:
                logger.info("DingTalk Stream mode connected again after %.0fs", time.monotonic() - outage_since)
                outage_since = None
            else:
                logger.info("DingTalk Stream mode connected")
            failures = 0
            try:
                await self._serve(ws)
            finally:
                self.connected.clear()
                self.client.websocket = None
                await ws.close()
            self.reconnects += 1

    async def _connect(self) -> ClientConnection:
        connection = await asyncio.to_thread(self.client.open_connection)
        if not connection or not connection.get("endpoint") or not connection.get("ticket"):
            raise ConnectionError("the connection-open request failed (the SDK logged DingTalk's answer)")
        uri = f'{connection["endpoint"]}?ticket={quote_plus(str(connection["ticket"]))}'
        opening = asyncio.ensure_future(websockets.connect(uri, ping_interval=None, close_timeout=2,
                                                           open_timeout=CONNECT_TIMEOUT_S))
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                ws = await asyncio.shield(opening)
        except BaseException:
            # Stopped (or timed out) mid-handshake: a socket that opens anyway is closed, not leaked.
            opening.add_done_callback(_close_late)
            raise
        self.client.websocket = ws
        self._last_alive = time.monotonic()
        self.connected.set()
        return ws

    async def _serve(self, ws: ClientConnection) -> None:
        """Frames, in order, until the socket closes, DingTalk says to leave, or it goes silent."""
        watch = asyncio.create_task(self._watch(ws), name="dingtalk-watchdog")
        try:
            async for raw in ws:
                self._last_alive = time.monotonic()
                if await self._route(raw) == DingTalkStreamClient.TAG_DISCONNECT:
                    logger.info("DingTalk asked this stream to reconnect")
                    return
        except websockets.ConnectionClosed:
            pass
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        logger.info("the DingTalk stream closed; reconnecting")

    async def _route(self, raw: str | bytes) -> str:
        """One frame through the SDK (its handler, then its ACK); a failure sends no ACK."""
        try:
            frame = json.loads(raw)
        except ValueError:
            logger.warning("DingTalk sent a frame that is not JSON; ignored")
            return ""
        try:
            return str(await self.client.route_message(frame) or "")
        except websockets.ConnectionClosed:
            raise
        except Exception:
            logger.exception("a DingTalk frame could not be handled; DingTalk will redeliver it")
            return ""

    async def _watch(self, ws: ClientConnection) -> None:
        """Ping, and close a socket silent (no frame, no pong) for ``watchdog_s``."""
        interval = max(0.02, min(self._ping_interval_s, self._watchdog_s / 4))
        while True:
            await asyncio.sleep(interval)
            idle = time.monotonic() - self._last_alive
            if idle >= self._watchdog_s:
                logger.warning("no frame or pong from DingTalk for %.1fs; reconnecting", idle)
                self.stale += 1
                ws.transport.abort()  # a dead peer would never finish a closing handshake
                return
            try:
                pong = await ws.ping()
            except websockets.ConnectionClosed:
                return
            asyncio.ensure_future(pong).add_done_callback(self._pong)

    def _pong(self, waiter: asyncio.Future[float]) -> None:
        if not waiter.cancelled() and waiter.exception() is None:
            self._last_alive = time.monotonic()


def _close_late(opening: asyncio.Future[ClientConnection]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        asyncio.ensure_future(opening.result().close())


def _describe(exc: BaseException) -> str:
    return type(exc).__name__ if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
