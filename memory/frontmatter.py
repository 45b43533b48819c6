"""YAML frontmatter of ``SKILL.md`` files — the one parser for skills and Dream.

A block is a first line that is exactly ``---``, YAML, and a closing line that is exactly
``---`` (or YAML's ``...``); trailing blanks on the delimiter lines are tolerated. Anything
else is not frontmatter: a ``----`` rule on line 1, a YAML line that merely *starts* with
``---`` (``description: --- note`` folded onto its own line) and a UTF-8 byte-order mark
in front — which editors on Windows add — are all handled instead of cutting the block short
or hiding it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class Frontmatter:
    """``meta`` is None when there is no valid mapping block; ``error`` says why, if it was
    there but broken. ``body`` is the text after the block (the whole text without one)."""

    meta: dict[str, Any] | None
    body: str
    error: str | None = None


def parse_frontmatter(text: str) -> Frontmatter:
    text = text.removeprefix(BOM)
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return Frontmatter(None, text)
    for index in range(1, len(lines)):
        if lines[index].rstrip() in ("---", "..."):
            break
    else:
        return Frontmatter(None, text, "the frontmatter has no closing '---' line")
    block = "".join(lines[1:index])
    body = "".join(lines[index + 1 :]).lstrip("\r\n")
    try:
        meta = yaml.safe_load(block) if block.strip() else {}
    except yaml.YAMLError as exc:
        return Frontmatter(None, body, f"invalid YAML: {exc}")
    if not isinstance(meta, dict):
        return Frontmatter(None, body, "the frontmatter is not a mapping of keys to values")
    return Frontmatter(meta, body)
