"""What an importer reads from another assistant, in our terms, before anything is written.

Each reader (``nanobot``, ``openclaw``, ``lucid``) turns the other side's layout into one
``Source``; ``apply.import_source`` is the only code that writes. Keeping the two apart is
what makes ``--dry-run`` honest: the dry run and the real run share the same plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class HistoryItem:
    timestamp: str  # "YYYY-MM-DD HH:MM"
    content: str

    def fingerprint(self, source: str) -> str:
        return hashlib.sha256(f"{source}\x1f{self.timestamp}\x1f{self.content}".encode()).hexdigest()[:24]


@dataclass(slots=True)
class SessionItem:
    key: str  # already mapped to our key scheme
    messages: list[dict[str, Any]]
    created_at: str | None = None
    updated_at: str | None = None
    last_consolidated: int = 0
    origin_key: str = ""


@dataclass(slots=True)
class Source:
    kind: str  # nanobot | openclaw | lucid
    root: Path
    # Long-term files by our relative path: SOUL.md, USER.md, memory/MEMORY.md.
    memory_files: dict[str, str] = field(default_factory=dict)
    # Daily notes by our relative path memory/YYYY-MM-DD.md.
    daily_notes: dict[str, str] = field(default_factory=dict)
    history: list[HistoryItem] = field(default_factory=list)
    sessions: list[SessionItem] = field(default_factory=list)
    skills: list[Path] = field(default_factory=list)  # folders holding SKILL.md
    # Channel settings offered into our config: {"telegram": {"token": ..., "allowFrom": [...]}}.
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def text_of(content: Any) -> str:
    """Message content as plain text (strings, or lists of typed parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                kind = part.get("type")
                if kind in ("text", "input_text", "output_text"):
                    parts.append(str(part.get("text", "")))
                elif kind in ("image", "image_url", "input_image"):
                    parts.append("[image]")
        return "\n".join(p for p in parts if p)
    return str(content)
