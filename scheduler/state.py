"""``workspace/state/scheduler.json``: when each job last ran, with what result, and when next.

Two readers need it: the gateway at start (a Dream that became due while the gateway was
down, or restarting, runs soon after start instead of waiting another interval), and
``lucid jobs``, which may run in another process than the gateway. Written atomically.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)


class JobState:
    """A small persisted ``{job: {field: value}}`` map; times are ISO strings."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}

    def load(self) -> dict[str, dict[str, Any]]:
        """Blocking. An unreadable file is logged and treated as empty, never fatal."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raw = {}
        except (OSError, ValueError):
            logger.warning("%s is unreadable; job history starts afresh", self.path)
            raw = {}
        jobs = raw.get("jobs") if isinstance(raw, dict) else None
        with self._lock:
            self._data = {k: dict(v) for k, v in (jobs or {}).items() if isinstance(v, dict)}
            return {k: dict(v) for k, v in self._data.items()}

    def get(self, job: str, field: str) -> Any:
        with self._lock:
            return self._data.get(job, {}).get(field)

    def time(self, job: str, field: str) -> datetime | None:
        value = self.get(job, field)
        try:
            return datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            return None

    def update(self, job: str, **fields: Any) -> None:
        """Blocking: merge ``fields`` into ``job`` as the file has it now, and write the file.

        Re-read first: another process (``lucid dream`` beside the gateway) may have recorded
        a run since this one loaded the file, and writing stale data would erase it."""
        self.load()
        with self._lock:
            entry = self._data.setdefault(job, {})
            for key, value in fields.items():
                entry[key] = value.isoformat() if isinstance(value, datetime) else value
            text = json.dumps({"v": 1, "jobs": self._data}, indent=2, sort_keys=True)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                atomic_write_text(self.path, text)
            except OSError:
                logger.exception("could not write %s", self.path)
