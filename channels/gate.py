"""The one access gate (DESIGN §9): may this sender talk to the assistant here, in which role,
and what is a stranger told?

Every platform channel asks its ``AccessGate`` before a message goes on the bus, and nothing
else decides. The rules, in one place:

* owners (``channels.<name>.owners``) are always allowed and are the only ``owner`` role;
* ``allowFrom`` ids match exactly, as strings; ``@username`` entries match the sender's
  username case-insensitively (discouraged: usernames change hands); nothing is split on a
  separator, and an empty list denies everyone but the owners;
* with ``pairing`` on, a sender the owner approved (``channels.pairing``) is allowed as a
  guest; switching ``pairing`` off again leaves only owners and ``allowFrom``;
* anyone else is refused with the configured ``refusal`` (``null``: silence), at most once
  per sender per interval; in a private chat with ``pairing`` on, the refusal carries a
  single-use code the owner approves with ``lucid pairing approve <code>``.

Refusals and pairing replies are ordinary ``OutboundText`` messages published on the bus,
so they leave through the channel's normal outbound path (its queue and flood limiter):
a platform's long rate-limit wait never stalls the channel's intake.

The ``Decision``'s role is stamped on the ``InboundMessage`` the adapter publishes
(``InboundMessage.role``); the agent reads it from there and never asks the config again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import ChatType, OutboundText, Role, Target
from lucidgate.channels.pairing import PairingError, PairingStore, default_path
from lucidgate.channels.registry import descriptor
from lucidgate.config.channel_schema import GatedSection

logger = logging.getLogger(__name__)

__all__ = ["AccessGate", "AccessRequest", "Decision", "Role", "Roster", "refusal_text"]

Outcome = Literal["allowed", "pairing", "refused"]

_REMEMBERED_SENDERS = 10_000


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """Who knocks, and where: the platform's ids as strings."""

    channel: str
    chat_id: str
    sender_id: str
    username: str | None = None
    chat_type: ChatType = "private"


@dataclass(frozen=True, slots=True)
class Decision:
    """``allowed``; ``pairing`` (a stranger who may ask for a code here); or ``refused``."""

    outcome: Outcome
    role: Role

    @property
    def allowed(self) -> bool:
        return self.outcome == "allowed"


class Roster:
    """A channel's owners and allow-list: the pure part of the decision."""

    def __init__(self, allow_from: Iterable[str], owners: Iterable[str]) -> None:
        entries = [str(e).strip() for e in allow_from if str(e).strip()]
        self._ids = frozenset(e for e in entries if not e.startswith("@"))
        self._usernames = frozenset(e[1:].lower() for e in entries if e.startswith("@"))
        self._owners = frozenset(str(o).strip() for o in owners if str(o).strip())

    @classmethod
    def of(cls, section: GatedSection) -> Roster:
        """From a gated ``channels.<name>`` section: its ``allowFrom`` and ``owners``."""
        return cls(section.allow_from, section.owner_ids())

    def is_owner(self, sender_id: str) -> bool:
        return str(sender_id) in self._owners

    def role(self, sender_id: str) -> Role:
        return "owner" if self.is_owner(sender_id) else "guest"

    def allows(self, sender_id: str, username: str | None = None) -> bool:
        sender_id = str(sender_id)
        if sender_id in self._owners or sender_id in self._ids:
            return True
        if not username:
            return False
        return username.lstrip("@").lower() in self._usernames


def refusal_text(refusal: str, code: str | None) -> str:
    """What a stranger is told: the configured refusal, plus the pairing code when one was issued."""
    if code is None:
        return refusal
    return (f"{refusal}\n\nPairing code: {code} (valid for 1 hour). "
            f"Ask the owner to run: lucid pairing approve {code}")


class AccessGate:
    """One channel's gate. ``admit`` is what an adapter calls for every inbound message."""

    def __init__(
        self,
        channel: str,
        bus: MessageBus,
        roster: Roster,
        store: PairingStore,
        *,
        refusal: str | None,
        pairing: bool,
        refusal_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self.roster = roster
        self.store = store
        self.refusal = refusal
        self.pairing = pairing
        self._bus = bus
        self._interval_s = refusal_interval_s
        self._clock = clock
        self._refused: OrderedDict[str, float] = OrderedDict()

    @classmethod
    def for_section(cls, channel: str, section: GatedSection, bus: MessageBus, store: PairingStore, *,
                    roster: Roster | None = None) -> AccessGate:
        """The gate for a ``channels.<name>`` section with ``allowFrom``, ``owners``, ``refusal``
        and ``pairing``; approvals live in ``store`` (the root's, shared by every gate).
        ``roster`` replaces the section's when a channel matches ids its own way (email
        addresses). How often a stranger is refused comes from the channel's descriptor."""
        known = descriptor(channel)
        if known is None:
            raise ValueError(f"no channel {channel!r} in channels.registry: add its descriptor")
        return cls(channel, bus, roster or Roster.of(section), store,
                   refusal=section.refusal, pairing=section.pairing,
                   refusal_interval_s=known.refusal_interval_s)

    @classmethod
    def of_channel(cls, channel: str, section: GatedSection, bus: MessageBus, *, gate: AccessGate | None,
                   pairing: PairingStore | None, workspace: Path, roster: Roster | None = None) -> AccessGate:
        """The gate a channel's constructor keeps: ``gate`` when one is given (a test's), else
        one over ``pairing`` — the root's store, which every registry factory passes. Only a
        channel built alone, outside any gateway (a test), opens the workspace's file itself."""
        if gate is not None:
            return gate
        store = pairing if pairing is not None else PairingStore(default_path(Path(workspace)))
        return cls.for_section(channel, section, bus, store, roster=roster)

    @property
    def refusal_interval_s(self) -> float:
        """A stranger hears the refusal at most once per this many seconds."""
        return self._interval_s

    def is_owner(self, sender_id: str) -> bool:
        return self.roster.is_owner(sender_id)

    def role(self, sender_id: str) -> Role:
        return self.roster.role(sender_id)

    async def check(self, req: AccessRequest) -> Decision:
        """The decision alone: nothing is issued or sent."""
        role = self.roster.role(req.sender_id)
        if self.roster.allows(req.sender_id, req.username):
            return Decision("allowed", role)
        if not self.pairing:
            return Decision("refused", role)
        if await asyncio.to_thread(self.store.is_approved, self.channel, req.sender_id):
            return Decision("allowed", role)
        return Decision("pairing" if req.chat_type == "private" else "refused", role)

    async def admit(self, req: AccessRequest, reply: Target) -> Decision:
        """Decide; for a stranger, publish the refusal (with a pairing code when pairing
        applies) to ``reply`` on the bus — at most once per sender per interval."""
        decision = await self.check(req)
        if decision.allowed:
            return decision
        logger.info("%s: refused a message from unknown sender %s in chat %s",
                    self.channel, req.sender_id, req.chat_id)
        if self.refusal is None or not self._due(req.sender_id):
            return decision
        code = None
        if decision.outcome == "pairing":
            try:
                code = await asyncio.to_thread(self.store.issue, self.channel, req.sender_id)
            except PairingError as exc:
                logger.warning("%s: no pairing code for %s: %s", self.channel, req.sender_id, exc)
        await self._bus.publish_outbound(OutboundText(reply, refusal_text(self.refusal, code), plain=True))
        return decision

    def _due(self, sender_id: str) -> bool:
        """True (and remembered) when this sender has not been answered within the interval."""
        now = self._clock()
        last = self._refused.get(sender_id)
        if last is not None and now - last < self._interval_s:
            return False
        self._refused[sender_id] = now
        self._refused.move_to_end(sender_id)
        while len(self._refused) > _REMEMBERED_SENDERS:
            self._refused.popitem(last=False)
        return True
