"""Stream mode for the DingTalk channel: the SDK's client, and our supervision of its socket.

The official ``dingtalk-stream`` SDK speaks the protocol: frames are parsed into its message
types, routed to the registered handlers, and each is answered with the ACK the SDK builds
(``route_message``). Its ``start()`` does not fit a daemon, so ``StreamSupervisor`` drives the
SDK's pieces instead:

* the connection-open request. The SDK's ``open_connection`` posts with blocking ``requests``,
  with no timeout, to the class constant ``OPEN_CONNECTION_API`` (read once, at import, from
  ``DINGTALK_OPENAPI_ENDPOINT``): it would stall the event loop, could hang for good, and its
  host can only be changed process-wide. ``StreamClient.open_request`` builds the same body the
  SDK sends (credentials, the subscriptions of the registered handlers, its user agent), and the
  supervisor posts it with the channel's ``httpx`` client to ``channels.dingtalk.apiBase``
  ``/v1.0/gateway/connections/open``, within a bounded wait — the one part of the SDK replaced,
  and only for where and how it is sent. (``localIp`` goes empty, as the SDK sends it when its
  UDP probe of 8.8.8.8 fails: it is informational.)
* failures back off exponentially (an outage is logged when it starts and when it ends) instead
  of a fixed 10 s sleep and a log line per attempt; ``stop()`` ends every task (the SDK's
  keepalive task runs forever);
* a frame is handled in arrival order and ACKed only after the intake has journalled the
  message, so an ACKed message is never lost (DingTalk redelivers an un-ACKed one);
* a liveness watchdog: the socket is pinged every ``ping_interval_s``; one with neither a frame
  nor a pong for ``watchdog_s`` is replaced, as is one DingTalk asks us to leave (the SDK's
  ``disconnect`` system topic).
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus

import httpx
import websockets
from dingtalk_stream import Credential, DingTalkStreamClient
from dingtalk_stream.version import VERSION_STRING
from websockets.asyncio.client import ClientConnection

from lucidgate.config.backoff import backoff_delay

logger = logging.getLogger(__name__)

OPEN_PATH = "/v1.0/gateway/connections/open"
USER_AGENT = f"DingTalkStream/1.0 SDK/{VERSION_STRING} Python/{platform.python_version()} (lucidgate)"


class StreamClient(DingTalkStreamClient):  # type: ignore[misc]  # the SDK is untyped
    """The SDK's client: its handlers, router and ACKs; its connection is opened by the supervisor."""

    def __init__(self, client_id: str, client_secret: str, *, sdk_logger: logging.Logger) -> None:
        super().__init__(Credential(client_id, client_secret), logger=sdk_logger)

    def open_request(self) -> dict[str, Any]:
        """The body of the connection-open request, as the SDK's ``open_connection`` writes it."""
        topics: list[dict[str, str]] = [{"type": "EVENT", "topic": "*"}] if self._is_event_required else []
        topics += [{"type": "CALLBACK", "topic": topic} for topic in self.callback_handler_map]
        return {"clientId": self.credential.client_id, "clientSecret": self.credential.client_secret,
                "subscriptions": topics, "ua": f"dingtalk-sdk-python/v{VERSION_STRING}-union", "localIp": ""}


class StreamSupervisor:
    """Keeps one Stream-mode socket open and feeds its frames to the SDK's router."""

    def __init__(self, client: StreamClient, http: Callable[[], httpx.AsyncClient], *, watchdog_s: float,
                 ping_interval_s: float, connect_timeout_s: float, backoff_s: float, max_backoff_s: float) -> None:
        self.client = client
        self._http = http
        self._connect_timeout_s = connect_timeout_s
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
        async with asyncio.timeout(self._connect_timeout_s):
            response = await self._http().post(OPEN_PATH, json=self.client.open_request(),
                                               headers={"User-Agent": USER_AGENT})
        try:
            connection = response.json()
        except ValueError:
            connection = None
        if response.status_code != 200 or not isinstance(connection, dict) \
                or not connection.get("endpoint") or not connection.get("ticket"):
            code = connection.get("code") if isinstance(connection, dict) else None
            raise ConnectionError(f"connections/open answered {response.status_code} {code or ''}".rstrip())
        uri = f'{connection["endpoint"]}?ticket={quote_plus(str(connection["ticket"]))}'
        opening = asyncio.ensure_future(websockets.connect(uri, ping_interval=None, close_timeout=2,
                                                           open_timeout=self._connect_timeout_s))
        try:
            async with asyncio.timeout(self._connect_timeout_s):
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


_closing: set[asyncio.Future[None]] = set()  # late closes, referenced until they finish


def _close_late(opening: asyncio.Future[ClientConnection]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        closing = asyncio.ensure_future(opening.result().close())
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)


def _describe(exc: BaseException) -> str:
    return type(exc).__name__ if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
