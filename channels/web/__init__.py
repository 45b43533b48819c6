"""The web console's chat channel: a browser tab is a chat, replies stream over SSE.

``WebChannel`` is a Channel like the others (``name``/``start``/``stop``/``send``); the
console's HTTP layer (``gateway/console``) authenticates the owner and calls ``post`` and
``subscribe``. ``ChatLog`` keeps each chat's durable events with increasing ids, so a
reconnecting tab resumes from the last id it saw without losing or repeating a message.
"""

from channels.web.channel import ToolLookup, WebChannel, create_channel
from channels.web.log import ChatEvent, ChatLog

__all__ = ["ChatEvent", "ChatLog", "ToolLookup", "WebChannel", "create_channel"]
