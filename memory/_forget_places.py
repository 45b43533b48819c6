"""The places a forget reaches, each as a plan (read, nothing written) and an apply step.

A plan holds, per file, the new text and the lines it loses, so the caller can judge the
whole forget (the drop guard) before anything changes. Blocking; run in worker threads.

    SOUL.md, USER.md, memory/MEMORY.md     lines holding the text go (headings are redacted)
    memory/<date>*.md                       daily notes and /new's session notes, the same
    memory/history.jsonl, memory/archive/   content lines go; an entry left empty goes
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lucidgate.config.fileio import atomic_write_bytes, atomic_write_text
from lucidgate.memory.tombstones import Matcher

__all__ = ["FilePlan", "HistoryPlan", "LONG_TERM", "apply_file", "apply_history", "count_lines",
           "note_paths", "plan_file", "plan_history"]

LONG_TERM = ("memory/MEMORY.md", "USER.md", "SOUL.md")
_NOTE = re.compile(r"^\d{4}-\d\d-\d\d(?:-.+)?\.md$")  # daily notes and /new's session notes


def note_paths(workspace: Path) -> list[Path]:
    folder = workspace / "memory"
    return sorted((p for p in folder.glob("*.md") if _NOTE.match(p.name)), reverse=True) \
        if folder.is_dir() else []


@dataclass(slots=True)
class FilePlan:
    rel: str
    text: str  # the file after the forget
    removed: list[str] = field(default_factory=list)
    total: int = 0  # non-empty lines before


@dataclass(slots=True)
class HistoryPlan:
    path: Path
    data: bytes
    removed: list[str] = field(default_factory=list)
    entries: int = 0  # entries touched
    total: int = 0  # content lines before


def count_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return None
    except UnicodeDecodeError:
        return None


def plan_file(workspace: Path, rel: str, matcher: Matcher) -> FilePlan | None:
    """What forgetting does to one markdown file; None when it holds nothing to forget.
    A heading keeps its place, with the matched words redacted: forgetting "user" must not
    tear the structure out of USER.md."""
    text = _read(workspace / rel)
    if text is None or not matcher.matches(text):
        return None
    kept: list[str] = []
    removed: list[str] = []
    for block in _blocks(text):
        if block.lstrip().startswith("#") and "\n" not in block.rstrip("\r\n"):
            redacted = matcher.redact(block)
            if redacted != block:
                removed.append(block.strip())
            kept.append(redacted)
            continue
        remaining, dropped = matcher.drop_lines(block)
        removed.extend(dropped)
        kept.append(remaining)
    return FilePlan(rel, "".join(kept), removed, count_lines(text))


def _blocks(text: str) -> list[str]:
    """Headings as blocks of their own; other runs of lines together, so a match across a
    line wrap is found (a heading never joins the text under it)."""
    blocks: list[str] = []
    run: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("#"):
            if run:
                blocks.append("".join(run))
                run = []
            blocks.append(line)
        else:
            run.append(line)
    if run:
        blocks.append("".join(run))
    return blocks


def apply_file(workspace: Path, plan: FilePlan) -> None:
    atomic_write_text(workspace / plan.rel, plan.text)


def plan_history(path: Path, matcher: Matcher) -> HistoryPlan | None:
    """What forgetting does to one history file (live or archive); None when untouched."""
    try:
        raw_lines = path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return None
    plan = HistoryPlan(path, b"")
    out: list[bytes] = []
    for raw in raw_lines:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            out.append(raw)
            continue
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, str):
            out.append(raw)
            continue
        plan.total += count_lines(content)
        kept, dropped = matcher.drop_lines(content)
        if not dropped:
            out.append(raw)
            continue
        plan.removed.extend(dropped)
        plan.entries += 1
        if kept.strip():
            data["content"] = kept.rstrip("\n")
            out.append((json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8"))
    if not plan.removed:
        return None
    plan.data = b"".join(out)
    return plan


def apply_history(plan: HistoryPlan) -> None:
    atomic_write_bytes(plan.path, plan.data)
