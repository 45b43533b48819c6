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
from pathlib import Path

from config.fileio import atomic_write_text

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
