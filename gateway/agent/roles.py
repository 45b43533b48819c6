"""The owner's private sessions (DESIGN §9), persisted, and the roles in stored history.

Who is an owner is decided by the gate that admitted a message, and the decision travels on
it (``InboundMessage.role``) into its transcript line (``sender_role``). This module keeps the
set of the owner's private session keys, so the prompt can show the owner's history across
their private chats, and Dream can tell which history may feed USER.md.

Stored history is the one place the config is asked again (``configured_role``): lines
written before messages carried their role have only a sender id, and a chunk of history is
the owner's only while its senders are still configured owners (``history_provenance``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from lucidgate.channels.messages import Role, SessionRef
from lucidgate.config.fileio import atomic_write_text
from lucidgate.config.schema import Config
from lucidgate.memory._history_index import Provenance
from lucidgate.memory.consolidator import ProvenanceOf
from lucidgate.memory.sessions import Session

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

    def discard_persist(self, key: str) -> bool:
        """Forget ``key`` (a chat that turned out to be shared); writes only when it was there."""
        if key not in self:
            return False
        self.discard(key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(sorted(self)))
        return True


def configured_role(config: Config, channel: str, sender_id: str) -> Role:
    """For stored history only: ``owner`` when the config lists ``sender_id`` among the
    owners of ``channel`` (``channels.<name>.owners``) today. A live message's role comes
    from its gate, never from here."""
    return "owner" if str(sender_id) in config.channels.owners_of(channel) else "guest"


def line_role(config: Config, channel: str, line: Mapping[str, Any]) -> Role:
    """The role of the sender of a stored user line: as its gate stamped it (``sender_role``),
    or — for a line written before messages carried their role — as the config has it."""
    stamped = line.get("sender_role")
    if stamped in ("owner", "guest"):
        return "owner" if stamped == "owner" else "guest"
    return configured_role(config, channel, str(line.get("sender_id") or ""))


def last_user_line(session: Session) -> dict[str, Any]:
    """The newest user line of ``session`` (empty when it has none)."""
    return next((m for m in reversed(session.messages) if m.get("role") == "user"), {})


def history_provenance(config: Config, owner_sessions: Collection[str]) -> ProvenanceOf:
    """The consolidator's provenance for a chunk of ``session``: its channel and chat type, and
    ``owner`` only when the session is one of the owner's private chats *and* every person who
    wrote in the chunk was admitted as an owner and is still a configured one — a chat that
    somehow mixed roles counts as a guest's, so Dream keeps it away from the long-term files."""

    def provenance(session: Session, chunk: list[dict[str, Any]]) -> Provenance:
        origin = SessionRef.from_stored(session.metadata)
        channel = origin.channel if origin is not None else session.key.split(":", 1)[0]
        chat_type = origin.chat_type if origin is not None else "private"
        writers = [m for m in chunk if m.get("role") == "user" and m.get("sender_id") not in (None, "")]
        owner = (chat_type == "private" and session.key in owner_sessions
                 and all(line_role(config, channel, m) == "owner"
                         and configured_role(config, channel, str(m["sender_id"])) == "owner"
                         for m in writers))
        return Provenance(channel=channel, chat_type=chat_type, owner=owner)

    return provenance
