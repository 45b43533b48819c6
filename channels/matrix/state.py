"""What the Matrix channel keeps between runs: ``state/matrix.json`` in the workspace.

* ``next_batch`` — the ``/sync`` token after the last batch whose events are all on the bus
  (journalled). It is written only then, so a crash replays at most that batch (the bus
  drops what it already has by event id) and never skips one.
* ``access_token`` / ``device_id`` — the session a password login created, reused on every
  start so the account does not grow a new device per restart, and so the homeserver's
  transaction ids (which make a retried send idempotent) stay in one device's scope.
* ``encrypted_notified`` — rooms already told that encryption is not supported.

The file belongs to one account on one homeserver: when either changes, it starts over.
It holds a credential, so it is written owner-only (0600), atomically (temp + rename).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lucidgate.config.fileio import atomic_write_bytes

logger = logging.getLogger(__name__)


def state_path(workspace: Path) -> Path:
    """Where the channel and ``lucid doctor`` find the state of a workspace."""
    return Path(workspace) / "state" / "matrix.json"


@dataclass(slots=True)
class MatrixState:
    homeserver: str
    user_id: str
    next_batch: str | None = None
    access_token: str | None = None
    device_id: str | None = None
    encrypted_notified: list[str] = field(default_factory=list)


def load_state(path: Path, homeserver: str, user_id: str) -> MatrixState:
    """The saved state for this account, or a fresh one (missing, unreadable, other account)."""
    fresh = MatrixState(homeserver, user_id)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return fresh
    except (OSError, ValueError):
        logger.warning("%s is unreadable; Matrix sync starts over (earlier messages are not answered)", path)
        return fresh
    if not isinstance(data, dict) or data.get("homeserver") != homeserver:
        return fresh
    if user_id and data.get("user_id") != user_id:
        return fresh
    try:
        state = MatrixState(**{k: data[k] for k in MatrixState.__slots__ if k in data})  # type: ignore[attr-defined]
    except TypeError:
        return fresh
    if not isinstance(state.encrypted_notified, list):
        state.encrypted_notified = []
    return state


def save_state(path: Path, state: MatrixState) -> None:
    """Write ``state`` atomically, readable by the owner only (blocking: run it in a thread)."""
    atomic_write_bytes(path, json.dumps(asdict(state)).encode(), mode=0o600)
