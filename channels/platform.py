"""What the platform channels (Telegram, Discord, Matrix, Slack) wire the same way around their SDKs.

``ChannelCore`` is what every one of them holds: its settings, the bus, the workspace and the
one access gate for its config section (``settings.access``).

``PlatformChannel`` adds the lifecycle the SDK-client channels (Telegram, Discord, Matrix)
share, because the same outage has to behave the same on every platform:

* **start never fails on an outage.** A platform that is unreachable at start is retried in
  the background with backoff (``_keep_connecting``); only a refusal for good (a bad token, a
  setup the platform rejects) ends that, logged with what to fix. ``_ready`` is set once the
  platform answers.
* **replies wait a while for the connection** (``send``): a reply made while the platform is
  still unreachable is held up to ``send_wait_s``, then handed back to the durable outbox
  (``DeliveryRetry``) to be retried; typing and previews are best-effort and dropped.
* **stop ends intake first, then drains** (``stop``): the channel's own tasks end, queued
  replies get a bounded chance to go out while the client still works, the channel leaves
  the bus, the typing loops end, and only then is the client closed (``_close``).

A subclass provides ``name``, ``label`` (the platform's name in log lines), settings derived
from ``PlatformSettings``, a ``sender`` with ``send`` and ``typing``, and ``_close``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lucidgate.channels._ratelimit import DeliveryRetry
from lucidgate.channels._stopping import cancel_tasks, flush_replies
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.gate import AccessGate
from lucidgate.channels.outfiles import FileRoots
from lucidgate.channels.pairing import PairingStore
from lucidgate.channels.messages import (OutboundError, OutboundMessage, OutboundProgress, OutboundText,
                                         OutboundTyping, Target)
from lucidgate.channels.typing_indicator import TypingIndicator
from lucidgate.config.backoff import backoff_delay
from lucidgate.config.redact import RedactingFilter, Redactor

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformSettings:
    """The tuning every SDK-client channel reads: not configuration (the config section holds
    that), and tests shorten it with ``from_section(section, retry_base_s=0.02)``."""

    retry_base_s: float = 1.0  # backoff while the platform is unreachable
    retry_max_s: float = 30.0
    send_wait_s: float = 30.0  # how long a reply waits for the connection before the outbox retries it
    typing_refresh_s: float = 4.0  # how often "typing…" is shown again while a turn runs
    typing_max_s: float = 120.0  # and for how long at the most


class Sender(Protocol):
    typing: TypingIndicator[Any]

    async def send(self, msg: OutboundMessage) -> None: ...


async def route(msg: OutboundMessage, typing: TypingIndicator[Target], *,
                preview: Callable[[OutboundProgress], Awaitable[None]] | None,
                reply: Callable[[OutboundText | OutboundError], Awaitable[None]]) -> None:
    """Hand one outbound message to a sender's part for its kind: typing starts the indicator,
    a progress update becomes the streaming preview (``preview`` is None with streaming off),
    and a reply or an error reply ends the indicator, then goes out."""
    if isinstance(msg, OutboundTyping):
        await typing.start(msg.target)
    elif isinstance(msg, OutboundProgress):
        if preview is not None:
            await preview(msg)
    else:
        typing.stop(msg.target)
        await reply(msg)


class ChannelCore:
    """Settings, bus, workspace and access gate of one platform channel."""

    name: str

    def __init__(self, settings: Any, bus: MessageBus, *, workspace: Path, gate: AccessGate | None,
                 pairing: PairingStore | None = None) -> None:
        self.settings = settings
        self.bus = bus
        self.workspace = Path(workspace)
        self.gate = AccessGate.of_channel(self.name, settings.access, bus, gate=gate, pairing=pairing,
                                          workspace=self.workspace)

    def is_owner(self, sender_id: str) -> bool:
        return self.gate.is_owner(sender_id)

    @property
    def file_roots(self) -> FileRoots:
        """Where a reply's files are found: this workspace, or the sending agent's."""
        return FileRoots(self.workspace, self.bus.agent_workspaces)


class PlatformChannel(ChannelCore):
    """The shared start/send/stop wiring of an SDK-client channel (see the module docstring)."""

    label: ClassVar[str]
    settings: PlatformSettings
    sender: Sender

    def __init__(self, settings: Any, bus: MessageBus, *, workspace: Path, gate: AccessGate | None,
                 pairing: PairingStore | None = None, secrets: Sequence[str] = ()) -> None:
        """``secrets``: the credentials that must never reach a log line (``_redactor``; a
        channel also installs it on the SDK's loggers while it runs)."""
        super().__init__(settings, bus, workspace=workspace, gate=gate, pairing=pairing)
        self._redactor = RedactingFilter(Redactor(secrets))
        self._ready = asyncio.Event()  # the platform answers: replies can go out
        self._stopping = False
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        self._tasks[name] = task = asyncio.create_task(coro, name=f"{self.name}-{name}")
        return task

    def _redact(self, text: str) -> str:
        """``text`` fit for a log line: no credential of this channel in it."""
        return self._redactor.redact(text)

    async def _keep_connecting(self, connect: Callable[[], Awaitable[None]], then: Callable[[], Awaitable[None]], *,
                               refused: tuple[type[BaseException], ...],
                               transient: tuple[type[BaseException], ...]) -> None:
        """Retry ``connect`` with backoff until the platform answers, then run ``then`` (intake);
        a ``refused`` error is for good: logged, and the channel stays offline."""
        failures = 0
        while not self._ready.is_set():
            failures += 1
            await asyncio.sleep(backoff_delay(failures, self.settings.retry_base_s, self.settings.retry_max_s))
            try:
                await connect()
            except refused as exc:
                logger.error("%s refused the channel setup (%s); the channel stays offline",
                             self.label, self._redact(f"{type(exc).__name__}: {exc}"))
                return
            except transient:
                continue
        await then()

    async def send(self, msg: OutboundMessage) -> None:
        if not self._ready.is_set():
            try:  # still connecting: hold the reply a while, then leave it to the outbox
                await asyncio.wait_for(self._ready.wait(), self.settings.send_wait_s)
            except TimeoutError:
                if msg.kind in ("text", "error"):  # durable: kept in the outbox and retried
                    raise DeliveryRetry(f"{self.label} is not connected yet") from None
                return
        await self.sender.send(msg)

    async def stop(self) -> None:
        """End intake, give queued replies a bounded chance, leave the bus, close; idempotent."""
        if self._stopping:
            return
        self._stopping = True
        await cancel_tasks(self._tasks)
        if self._ready.is_set():  # nothing can go out otherwise: what is queued stays durable
            await flush_replies(self.bus, logger, f"{self.label} replies still queued at shutdown stay in the outbox")
        self.bus.unsubscribe(self.name)
        self.sender.typing.cancel_all()
        try:
            await self._close()
        except Exception:
            logger.exception("closing the %s client failed", self.label)
        self._ready.clear()

    async def _close(self) -> None:
        """Release the SDK client (and whatever start installed around it)."""
        raise NotImplementedError
