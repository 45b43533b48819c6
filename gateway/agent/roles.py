"""The owner's private sessions (DESIGN §9), persisted.

Who is an owner is decided by the access gate (``channels.gate.role_of``: owners are
configured per channel, ``channels.<name>.owners``; the terminal user is always the owner).
This module keeps the set of the owner's private session keys, so the prompt can show the
owner's history across their private chats, and Dream can tell which history may feed
USER.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

from channels.gate import role_of
from config.fileio import atomic_write_text
from config.schema import Config
from memory._history_index import Provenance
from memory.consolidator import ProvenanceOf
from memory.sessions import Session

logger = logging.getLogger(__name__)


class OwnerSessions(set[str]):
    """A persisted set of session keys; ``add_persist`` writes only when the set grows."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self.update(str(k) for k in data if isinstance(k, str))
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            logger.warning("%s is unreadable; starting with no owner sessions", path)

    def add_persist(self, key: str) -> bool:
        if key in self:
            return False
        self.add(key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(sorted(self)))
        return True


def history_provenance(config: Config, owner_sessions: Collection[str]) -> ProvenanceOf:
    """The consolidator's provenance for a chunk of ``session``: its channel and chat type, and
    ``owner`` only when the session is one of the owner's private chats *and* every person who
    wrote in the chunk is an owner (``role_of``) — a chat that somehow mixed roles counts as a
    guest's, so Dream keeps it away from the long-term files."""

    def provenance(session: Session, chunk: list[dict[str, Any]]) -> Provenance:
        origin = session.metadata.get("origin") or {}
        channel = str(origin.get("channel") or session.key.split(":", 1)[0])
        chat_type = str(origin.get("chat_type") or "private")
        senders = {str(m["sender_id"]) for m in chunk
                   if m.get("role") == "user" and m.get("sender_id") not in (None, "")}
        owner = (chat_type == "private" and session.key in owner_sessions
                 and all(role_of(config, channel, s) == "owner" for s in senders))
        return Provenance(channel=channel, chat_type=chat_type, owner=owner)

    return provenance
