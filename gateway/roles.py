"""Roles (DESIGN §9): who is an owner, and which sessions are the owner's private chats.

Owners are configured per channel (``channels.<name>.owners``); the terminal user is
always the owner. The set of the owner's private session keys is persisted so the prompt
can show the owner's history across their private chats, and Dream can tell which
history may feed USER.md.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from config.onboard import atomic_write_text
from config.schema import Config
from gateway.turn import Role

logger = logging.getLogger(__name__)


def role_of(config: Config, channel: str, sender_id: str) -> Role:
    section = getattr(config.channels, channel, None)
    owners = getattr(section, "owners", None) or []
    return "owner" if str(sender_id) in {str(o) for o in owners} else "guest"


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
