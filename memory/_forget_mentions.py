"""``mentions``: what memory holds about a text, as a forget of it would see it (read only)."""

from __future__ import annotations

import json
from pathlib import Path

from lucidgate.memory._forget_places import note_paths

__all__ = ["mentions"]


def mentions(workspace: Path, text: str, limit: int = 60) -> list[str]:
    """Lines of MEMORY.md, USER.md, the daily and session notes and history (live and
    archived) that contain ``text`` (case-insensitive), as ``where: line``; at most
    ``limit``. Reads files; call it in a worker thread."""
    needle = " ".join(text.casefold().split())
    if not needle:
        raise ValueError("say what to look for")
    memory = workspace / "memory"
    found: list[str] = []
    for path in [memory / "MEMORY.md", workspace / "USER.md", *note_paths(workspace)]:
        for number, line in enumerate(_lines(path), 1):
            if needle in " ".join(line.casefold().split()) and line.strip():
                found.append(f"{path.relative_to(workspace).as_posix()}:{number}: {line.strip()}")
    for path in [memory / "history.jsonl", *sorted((memory / "archive").glob("history-*.jsonl"))]:
        for raw in _lines(path):
            try:
                entry = json.loads(raw)
                content, cursor = str(entry["content"]), entry.get("cursor")
            except (ValueError, KeyError, TypeError):
                continue
            found += [f"history #{cursor} {entry.get('timestamp', '')}: {line.strip()}"
                      for line in content.splitlines() if needle in " ".join(line.casefold().split())]
    return found[:limit] + ([f"[{len(found) - limit} more; narrow the text]"] if len(found) > limit else [])


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
