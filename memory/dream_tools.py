"""The three tools Dream's phase 2 may use, with every guard of DESIGN §5.3.

They reach exactly the files GitStore versions — ``SOUL.md``, ``USER.md``,
``memory/MEMORY.md`` (``edit_file``) and new skills under ``skills/`` (``write_file``) —
so every change Dream makes can be undone with ``/dream-restore``. A refused call is an
``Error: …`` string for the model, never an exception: the model can correct itself.

Built-in skills (a folder the composition root hands in; memory never imports the gateway)
are part of the inventory: ``read_file`` reads ``skills/<name>/...`` from there when the
workspace has no copy, and no new skill may take a built-in's name — a workspace skill of
that name would replace the built-in in every prompt. Dream may instead *propose* an
override at ``skills/_proposed/<name>/SKILL.md`` (not loaded as a skill); the owner applies
it by moving it to ``skills/<name>/``. With built-ins present, a skill is written only after
``skills/skill-creator/SKILL.md`` (the format reference) was read in the same run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write_text, read_text_or_empty
from lucidgate.memory.frontmatter import parse_frontmatter
from lucidgate.memory.textedit import EditError, replace_exact
from lucidgate.memory.tombstones import Tombstones

logger = logging.getLogger(__name__)

MEMORY_FILES = ("SOUL.md", "USER.md", "memory/MEMORY.md")
SKILL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_SKILL_CHARS = 8000
MAX_READ_CHARS = 40_000


class ToolRefused(Exception):
    """A guard refused the call; the message goes back to the model."""


PROPOSED = "_proposed"  # skills/_proposed/<built-in>/SKILL.md: an override for the owner to apply
FORMAT_REFERENCE = "skills/skill-creator/SKILL.md"


@dataclass(frozen=True, slots=True)
class SkillInfo:
    name: str
    description: str
    builtin: bool = False


def _skill_folders(root: Path | None) -> list[Path]:
    if root is None or not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != PROPOSED)


def list_skills(workspace: Path, builtin: Path | None = None) -> list[SkillInfo]:
    """Every skill the prompt lists: ``skills/<name>/SKILL.md`` in the workspace, then the
    built-ins in ``builtin`` that the workspace does not override (name and description
    from frontmatter)."""
    found: dict[str, SkillInfo] = {}
    for root, is_builtin in ((workspace / "skills", False), (builtin, True)):
        for folder in _skill_folders(root):
            if folder.name in found or (is_builtin and not (folder / "SKILL.md").is_file()):
                continue
            meta = parse_frontmatter(read_text_or_empty(folder / "SKILL.md")).meta or {}
            description = str(meta.get("description") or "").strip()
            found[folder.name] = SkillInfo(folder.name, description, is_builtin)
    return [found[name] for name in sorted(found)]


def builtin_names(builtin: Path | None) -> set[str]:
    return {p.name.lower() for p in _skill_folders(builtin) if (p / "SKILL.md").is_file()}


def entries(text: str) -> Counter[str]:
    """A file's entries for the drop guard: its non-empty lines (bullets included)."""
    return Counter(line.strip() for line in text.splitlines() if line.strip())


TOOL_SCHEMAS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read SOUL.md, USER.md, memory/MEMORY.md or a file under skills/.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace."}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "edit_file",
        "description": ("Replace one exact, unique snippet of SOUL.md, USER.md or memory/MEMORY.md."
                        " Use an empty new_text to delete the snippet."),
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"},
            "old_text": {"type": "string", "description": "Exact text, occurring once in the file."},
            "new_text": {"type": "string"}},
            "required": ["path", "old_text", "new_text"]}}},
    {"type": "function", "function": {
        "name": "write_file",
        "description": ("Create a NEW skill at skills/<name>/SKILL.md (YAML frontmatter with name"
                        " and description, then the steps). Existing skills are never overwritten;"
                        " for a built-in, propose at skills/_proposed/<name>/SKILL.md."),
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]}}},
]


@dataclass
class DreamTools:
    """Phase-2 tools bound to one workspace and one run (``changes`` lists what succeeded)."""

    workspace: Path
    size_caps: dict[str, int]
    # False when the run holds entries that are not the owner's private words: every write is
    # refused (Dream filters those entries out first; this is the guard behind that filter).
    trusted: bool = True
    changes: list[str] = field(default_factory=list)
    builtin: Path | None = None  # the built-in skills' folder, when there are any
    read_reference: bool = False  # skill-creator was read in this run

    async def call(self, name: str, raw_arguments: str) -> str:
        try:
            args = json.loads(raw_arguments or "{}")
        except ValueError:
            return "Error: the arguments are not valid JSON; send a JSON object"
        if not isinstance(args, dict):
            return "Error: the arguments must be a JSON object"
        handler = {"read_file": self._read, "edit_file": self._edit,
                   "write_file": self._write}.get(name)
        if handler is None:
            return f"Error: unknown tool {name!r}; use read_file, edit_file or write_file"
        if name != "read_file" and not self.trusted:
            logger.warning("dream tool %s refused: this run holds history from guests or group chats, "
                           "which may not change SOUL.md, USER.md, memory/MEMORY.md or skills", name)
            return ("Error: this run holds history from guests or group chats; it may not change "
                    "SOUL.md, USER.md, memory/MEMORY.md or skills")
        try:
            return await asyncio.to_thread(handler, args)
        except ToolRefused as exc:
            logger.info("dream tool %s refused: %s", name, exc)
            return f"Error: {exc}"
        except OSError as exc:
            logger.warning("dream tool %s failed: %s", name, exc)
            return f"Error: {exc.strerror or exc}"

    # ------------------------------------------------------------------ paths
    def _resolve(self, path: object) -> tuple[Path, Path]:
        if not isinstance(path, str) or not path.strip():
            raise ToolRefused("'path' must be a non-empty string")
        root = self.workspace.resolve()
        candidate = Path(path.strip())
        full = (candidate if candidate.is_absolute() else root / candidate).resolve()
        return root, full

    def _memory_file(self, path: object) -> str:
        root, full = self._resolve(path)
        for rel in MEMORY_FILES:
            if full == (root / rel).resolve():
                return rel
        raise ToolRefused(f"{path!r} is not editable; edit_file only changes "
                          "SOUL.md, USER.md or memory/MEMORY.md")

    # ------------------------------------------------------------------ tools
    def _read(self, args: dict[str, Any]) -> str:
        root, full = self._resolve(args.get("path"))
        skills = (root / "skills").resolve()
        allowed = any(full == (root / rel).resolve() for rel in MEMORY_FILES)
        if not allowed and not full.is_relative_to(skills):
            raise ToolRefused(f"{args.get('path')!r} is outside what Dream may read "
                              "(SOUL.md, USER.md, memory/MEMORY.md, skills/)")
        if not full.is_file() and full.is_relative_to(skills):
            full = self._builtin_file(full.relative_to(skills)) or full
        if not full.is_file():
            raise ToolRefused(f"{args.get('path')!r} does not exist")
        if full.name == "SKILL.md" and full.parent.name == "skill-creator":
            self.read_reference = True
        # Long files are cut by the tool loop (max_result_chars=MAX_READ_CHARS).
        return full.read_text(encoding="utf-8", errors="replace") or "(empty file)"

    def _builtin_file(self, rel: Path) -> Path | None:
        """The built-in copy behind ``skills/<rel>`` (the workspace has none), kept inside
        that skill's folder."""
        if self.builtin is None or len(rel.parts) < 2:
            return None
        folder = (self.builtin / rel.parts[0]).resolve()
        candidate = (folder / Path(*rel.parts[1:])).resolve()
        return candidate if candidate.is_relative_to(folder) and candidate.is_file() else None

    def _edit(self, args: dict[str, Any]) -> str:
        rel = self._memory_file(args.get("path"))
        old, new = args.get("old_text"), args.get("new_text")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ToolRefused("'old_text' and 'new_text' must be strings")
        path = self.workspace / rel
        text = read_text_or_empty(path)
        if old == "" and not text.strip() and new:
            updated = new  # an empty file is filled by quoting nothing
        else:
            try:
                updated, _ = replace_exact(text, old, new, shown=rel, offer_replace_all=False)
            except EditError as exc:
                raise ToolRefused(str(exc)) from None
        updated = self._without_forgotten(updated)
        self._check_size(rel, text, updated)
        self._check_drops(rel, text, updated)
        atomic_write_text(path, updated)
        self.changes.append(f"edited {rel}")
        return f"OK: edited {rel} ({len(updated)} chars)"

    def _without_forgotten(self, text: str) -> str:
        """What the owner asked to forget never comes back through Dream: its lines go."""
        kept, dropped = Tombstones(self.workspace).matcher().drop_lines(text)
        if dropped:
            logger.info("dream: %d line(s) matching a forgotten text not written", len(dropped))
        return kept

    def _check_size(self, rel: str, before: str, after: str) -> None:
        cap = self.size_caps.get(rel)
        if cap is not None and len(after) > cap and len(after) > len(before):
            raise ToolRefused(f"{rel} would grow to {len(after)} chars, over its cap of {cap}; "
                              "condense or drop stale entries instead of adding")

    @staticmethod
    def _check_drops(rel: str, before: str, after: str) -> None:
        existing = entries(before)
        dropped = sum((existing - entries(after)).values())
        total = sum(existing.values())
        if dropped > max(1.0, total / 4):
            raise ToolRefused(f"this edit would remove or rewrite {dropped} of {rel}'s {total} "
                              "entries (more than a quarter); make smaller, surgical edits")

    def _write(self, args: dict[str, Any]) -> str:
        root, full = self._resolve(args.get("path"))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolRefused("'content' must be a string")
        if any(full == (root / rel).resolve() for rel in MEMORY_FILES):
            raise ToolRefused("use edit_file for SOUL.md, USER.md and memory/MEMORY.md")
        skills = (root / "skills").resolve()
        rel_parts = full.relative_to(skills).parts if full.is_relative_to(skills) else ()
        proposal = len(rel_parts) == 3 and rel_parts[0] == PROPOSED
        if proposal:
            rel_parts = rel_parts[1:]
        if len(rel_parts) != 2 or rel_parts[1] != "SKILL.md":
            raise ToolRefused("write_file only creates skills/<name>/SKILL.md")
        name = rel_parts[0]
        if not SKILL_NAME_RE.match(name):
            raise ToolRefused(f"skill name {name!r} must be lowercase letters, digits, '-' or '_'")
        builtins = builtin_names(self.builtin)
        if proposal and name.lower() not in builtins:
            raise ToolRefused(f"{name!r} is not a built-in skill; create skills/{name}/SKILL.md instead")
        if not proposal and name.lower() in builtins:
            raise ToolRefused(f"{name!r} is a built-in skill; Dream never replaces one. To suggest a "
                              f"change, write the whole proposed file to skills/{PROPOSED}/{name}/SKILL.md "
                              "for the owner to apply")
        target = skills / PROPOSED / name if proposal else skills / name
        taken = {s.name.lower() for s in list_skills(self.workspace)}
        if (not proposal and name.lower() in taken) or target.exists():
            raise ToolRefused(f"skill {name!r} already exists; existing skills are never "
                              "overwritten — skip it or extend a different one")
        if "skill-creator" in builtins and not self.read_reference:
            raise ToolRefused(f"read {FORMAT_REFERENCE} first: it is the format every skill follows")
        if len(content) > MAX_SKILL_CHARS:
            raise ToolRefused(f"a skill may hold at most {MAX_SKILL_CHARS} chars")
        meta = parse_frontmatter(content).meta
        if meta is None or not meta.get("name") or not meta.get("description"):
            raise ToolRefused("SKILL.md must start with YAML frontmatter holding 'name' and "
                              "'description' between '---' lines")
        if str(meta["name"]).strip() != name:
            raise ToolRefused(f"frontmatter name {meta['name']!r} must equal the folder name {name!r}")
        rel = target.relative_to(root).as_posix() + "/SKILL.md"
        atomic_write_text(target / "SKILL.md", self._without_forgotten(content))
        if proposal:
            self.changes.append(f"proposed {rel} (replaces the built-in {name} once moved to skills/{name}/)")
        else:
            self.changes.append(f"created {rel}")
        return f"OK: {'proposed' if proposal else 'created'} {rel}"
