"""Where the IMAP intake stands: ``state/email.json`` in the workspace.

* ``uidvalidity`` — the folder's UIDVALIDITY when ``last_uid`` was written. UIDs mean
  something only together with it: when the server reports another value (the folder was
  recreated, the account moved), the saved UID is meaningless and intake starts over from
  the folder's current end (logged), rather than answering the whole folder again.
* ``last_uid`` — the highest UID already handled: every mail up to it is in the inbox
  journal (or was deliberately skipped). It is written only after that, atomically (temp +
  rename), so a crash re-reads at most the mail it was handling (the journal drops it as a
  duplicate) and never skips one.

The file belongs to one account and folder (``account``); when either changes it starts over.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from lucidgate.config.fileio import atomic_write_bytes

logger = logging.getLogger(__name__)

__all__ = ["ImapState", "load_state", "save_state", "state_path"]


def state_path(workspace: Path) -> Path:
    """Where the channel and ``lucid doctor`` find the intake state of a workspace."""
    return Path(workspace) / "state" / "email.json"


@dataclass(slots=True)
class ImapState:
    account: str
    uidvalidity: int | None = None
    last_uid: int = 0


def load_state(path: Path, account: str) -> ImapState:
    """The saved state for ``account``, or a fresh one (missing, unreadable, another account)."""
    fresh = ImapState(account)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return fresh
    except (OSError, ValueError):
        logger.warning("%s is unreadable; email intake starts at the folder's end", path)
        return fresh
    if not isinstance(data, dict) or data.get("account") != account:
        return fresh
    validity, last = data.get("uidvalidity"), data.get("last_uid")
    if not isinstance(validity, int) or not isinstance(last, int) or last < 0:
        return fresh
    return ImapState(account, validity, last)


def save_state(path: Path, state: ImapState) -> None:
    """Write ``state`` atomically (blocking: run it in a thread)."""
    atomic_write_bytes(path, json.dumps(asdict(state)).encode())
