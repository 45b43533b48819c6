"""Private or shared, for good: a session's chat kind only ever moves from private to shared.

Channels decide the kind of each message from platform facts. A session remembers the kind
it was created with (its stored origin); if a later message says the chat is shared, the
session becomes shared — the origin is rewritten and the session leaves the owner's private
set, so its transcript and history stop counting as the owner's own words. A later message
that says "private" for a shared session changes nothing: no member count or flag a stranger
can influence ever turns a shared chat back into the owner's private one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from lucidgate.channels.messages import ChatType, SessionRef
from lucidgate.gateway.agent.roles import OwnerSessions
from lucidgate.memory.sessions import Session, SessionStore
from lucidgate.memory.speakers import is_shared

logger = logging.getLogger(__name__)


async def settled_kind(sessions: SessionStore, owner_sessions: OwnerSessions, session: Session,
                       said: ChatType) -> ChatType:
    """The chat kind a turn of ``session`` runs with, given the message's own ``said``."""
    origin = SessionRef.from_stored(session.metadata)
    if origin is None:
        return said
    if is_shared(origin.chat_type):
        return origin.chat_type
    if not is_shared(said):
        return said
    logger.info("%s is a shared chat from now on (was private)", session.key)
    await sessions.set_origin(session, replace(origin, chat_type=said).stored())
    await asyncio.to_thread(owner_sessions.discard_persist, session.key)
    return said
