"""Channel adapters, the message types and the MessageBus they publish to.

Adapters for platforms are imported only when enabled (see ``channels.registry``).
"""

from channels.bus import BusClosed, BusFull, Delivery, MessageBus
from channels.messages import (
    InboundMessage,
    OutboundError,
    OutboundMessage,
    OutboundProgress,
    OutboundText,
    OutboundTyping,
    Target,
)

__all__ = [
    "BusClosed",
    "BusFull",
    "Delivery",
    "InboundMessage",
    "MessageBus",
    "OutboundError",
    "OutboundMessage",
    "OutboundProgress",
    "OutboundText",
    "OutboundTyping",
    "Target",
]
