"""A transcript's ``last_consolidated`` sidecar (``<stem>.state.json``), read side.

Consolidation recurs all through a session's life, so its count lives in this tiny file
instead of line 1 (rewriting line 1 copies the whole transcript). The sidecar wins over a
count in line 1 (older files, imports); an unreadable one falls back to line 1.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from lucidgate.memory.naming import read_header

logger = logging.getLogger(__name__)

__all__ = ["persisted_last_consolidated", "read_state", "state_path"]


def state_path(path: Path) -> Path:
    """The sidecar holding ``last_consolidated`` for the transcript at ``path``."""
    return path.with_name(path.name[: -len(".jsonl")] + ".state.json")


def read_state(path: Path) -> int | None:
    try:
        value = json.loads(state_path(path).read_text(encoding="utf-8"))["last_consolidated"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        logger.warning("%s is unreadable; using the transcript's header", state_path(path).name)
        return None
    return value if isinstance(value, int) and value >= 0 else None


def persisted_last_consolidated(path: Path) -> int:
    """What a restart would load as ``last_consolidated`` (sidecar first, then line 1)."""
    sidecar = read_state(path)
    if sidecar is not None:
        return sidecar
    header = read_header(path)
    return int(header.get("last_consolidated", 0)) if header else 0
