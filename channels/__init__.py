"""Channel adapters, the message types and the MessageBus they publish to.

Adapters for platforms are imported only when enabled (see ``channels.registry``). The
names below load on first use (PEP 562): a command that reads one store (``lucid status``
counting the outbox) should not import the bus and its event loop machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.config.lazy import lazy_names

if TYPE_CHECKING:
    from lucidgate.channels.bus import BusClosed, BusFull, Delivery, MessageBus
    from lucidgate.channels.messages import (InboundMessage, OutboundError, OutboundMessage, OutboundProgress, OutboundText,
                                   OutboundTyping, Target)

__all__ = ["BusClosed", "BusFull", "Delivery", "InboundMessage", "MessageBus", "OutboundError", "OutboundMessage",
           "OutboundProgress", "OutboundText", "OutboundTyping", "Target"]

_HOMES = {"BusClosed": "bus", "BusFull": "bus", "Delivery": "bus", "MessageBus": "bus",
          **{name: "messages" for name in ("InboundMessage", "OutboundError", "OutboundMessage", "OutboundProgress",
                                           "OutboundText", "OutboundTyping", "Target")}}

__getattr__ = lazy_names(__name__, _HOMES)
