"""Whether the last memory commit worked, kept where ``lucid doctor`` can read it.

A memory commit that fails must not take a turn, a one-shot or the gateway down with it,
so its callers log the failure and carry on; this small file is what keeps the failure
visible afterwards. ``state/memory_commit.json`` holds the last failure (when, what,
what git said) and the names left out of commits because they cannot be stored (a folder
spelled like ``.git``, bytes that are not UTF-8). A later successful commit clears the failure; a commit that sees no
such names clears the skipped list. No file at all means "never failed".

    {"failed_at": "2026-…Z", "error": "git commit failed: …", "skipped": ["skills/\\\\xff.md"]}

Writes are atomic; reads never raise (a damaged file reads as "unknown failure").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["COMMIT_STATE", "CommitHealth", "CommitState"]

COMMIT_STATE = Path("state") / "memory_commit.json"


@dataclass(frozen=True, slots=True)
class CommitState:
    failed_at: str | None = None
    error: str | None = None
    skipped: tuple[str, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        return self.error is None and not self.skipped


class CommitHealth:
    """The persisted outcome of the workspace's memory commits (blocking file I/O)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> CommitState:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return CommitState()
        except (OSError, ValueError):
            return CommitState(error=f"{self.path} is unreadable")
        if not isinstance(raw, dict):
            return CommitState(error=f"{self.path} is unreadable")
        error = raw.get("error")
        skipped = raw.get("skipped")
        return CommitState(failed_at=str(raw["failed_at"]) if raw.get("failed_at") else None,
                           error=str(error) if error else None,
                           skipped=tuple(str(s) for s in skipped) if isinstance(skipped, list) else ())

    def failed(self, error: str) -> None:
        """Record that a commit failed with ``error`` (kept until a commit succeeds)."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._write(CommitState(failed_at=now, error=error, skipped=self.read().skipped))

    def succeeded(self, skipped: tuple[str, ...] = ()) -> None:
        """Record a commit that worked; ``skipped``: the names it had to leave out."""
        if self.read() != CommitState(skipped=skipped):
            self._write(CommitState(skipped=skipped))

    def _write(self, state: CommitState) -> None:
        try:
            if state == CommitState():
                self.path.unlink(missing_ok=True)
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"failed_at": state.failed_at, "error": state.error,
                                                     "skipped": list(state.skipped)}, ensure_ascii=False))
        except OSError as exc:  # the state is a report; never the reason a commit "fails"
            logger.warning("could not record the memory commit state in %s: %s", self.path, exc)
