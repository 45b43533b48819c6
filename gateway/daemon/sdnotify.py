"""systemd's notification protocol (``sd_notify``), a few lines of socket code.

Under ``Type=notify`` systemd waits for ``READY=1`` before it calls the service started,
shows the last ``STATUS=`` line in ``systemctl status``, and with ``WatchdogSec=`` restarts
the process when ``WATCHDOG=1`` stops arriving. The pings come from a task on the event
loop on purpose: a loop that is blocked (a stuck synchronous call, a busy loop) stops
pinging, which is exactly the hang systemd should catch. A thread would keep pinging.

Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping

logger = logging.getLogger(__name__)


class Notifier:
    """Sends datagrams to ``$NOTIFY_SOCKET``; silent when there is none."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.address = _socket_address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_s = _watchdog_seconds(env)
        self._sock: socket.socket | None = None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str) -> bool:
        """Send ``KEY=value`` lines; True when the datagram went out."""
        if self.address is None:
            return False
        payload = "\n".join(f"{key.upper()}={value}" for key, value in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            # MSG_DONTWAIT: a full receive queue must never block the event loop.
            self._sock.sendto(payload, socket.MSG_DONTWAIT, self.address)
        except OSError as exc:
            if not self._warned:  # once: a broken socket must not flood the log
                logger.warning("cannot notify systemd at %r: %s", self.address, exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(ready="1", status=status)

    def status(self, text: str) -> bool:
        return self.send(status=text)

    def stopping(self, status: str = "draining") -> bool:
        return self.send(stopping="1", status=status)

    def ping(self) -> bool:
        return self.send(watchdog="1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def watchdog(self, interval_s: float | None = None) -> None:
        """Ping until cancelled, every half of ``WatchdogSec`` (or ``interval_s``)."""
        interval = interval_s if interval_s is not None else (self.watchdog_s or 0) / 2
        if interval <= 0 or not self.enabled:
            return
        while True:
            self.ping()
            await asyncio.sleep(interval)


def _socket_address(value: str) -> str | None:
    if not value:
        return None
    if value.startswith("@"):  # abstract namespace
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    logger.warning("NOTIFY_SOCKET=%r is not a unix socket path; not notifying systemd", value)
    return None


def _watchdog_seconds(env: Mapping[str, str]) -> float | None:
    """``WatchdogSec=`` as seconds, when it is meant for this process."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) <= 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 1_000_000
