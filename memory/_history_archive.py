"""The history archive: where compaction moves old entries instead of deleting them.

    memory/archive/history-YYYY-MM.jsonl    one file per month of the entries' timestamps

Files are append-only (fsynced) except for a forget, the one deliberate deletion, which
rewrites them atomically without the forgotten lines (``memory.forget``). Appending is idempotent per file:
entries whose cursor is not above the file's last cursor are skipped, so a compaction
interrupted between "archive" and "rewrite history.jsonl" never archives twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path


__all__ = ["archive_entries", "archive_files"]


def _month(raw: bytes) -> tuple[str, int | None]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return "undated", None
    if not isinstance(data, dict):
        return "undated", None
    stamp, cursor = data.get("timestamp"), data.get("cursor")
    month = stamp[:7] if isinstance(stamp, str) and len(stamp) >= 7 and stamp[4] == "-" else "undated"
    return month, cursor if type(cursor) is int else None


def _last_cursor(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            tail = fh.read().splitlines()
    except FileNotFoundError:
        return 0
    for raw in reversed(tail):
        _, cursor = _month(raw)
        if cursor is not None:
            return cursor
    return 0


def archive_entries(archive_dir: Path, lines: Iterable[bytes]) -> int:
    """Append history lines to their month's archive file; returns how many were written."""
    by_month: dict[str, list[bytes]] = {}
    for raw in lines:
        if raw.strip():
            month, _ = _month(raw)
            by_month.setdefault(month, []).append(raw if raw.endswith(b"\n") else raw + b"\n")
    written = 0
    for month, batch in by_month.items():
        archive_dir.mkdir(parents=True, exist_ok=True)
        path = archive_dir / f"history-{month}.jsonl"
        last = _last_cursor(path)
        fresh = [raw for raw in batch if (_month(raw)[1] or last + 1) > last]
        if not fresh:
            continue
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            data = memoryview(b"".join(fresh))
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        written += len(fresh)
    return written


def archive_files(archive_dir: Path) -> list[Path]:
    return sorted(archive_dir.glob("history-*.jsonl")) if archive_dir.is_dir() else []
