"""Skills: ``skills/<name>/SKILL.md`` with YAML frontmatter (DESIGN §6).

Frontmatter keys: ``name``, ``description``, ``always`` (inline the full text in every
prompt), ``requires: {bins: [...], env: [...]}``. Skills written for nanobot or OpenClaw
work unchanged: ``metadata: {"nanobot": {...}}`` and ``metadata: {"openclaw": {...}}``
(also as a JSON string) carry the same ``always``/``requires`` plus OpenClaw's
``requires.anyBins``, ``requires.config`` (config keys that must be set, as dotted paths
into our config) and ``os`` (``linux``, ``darwin``, ``win32``).

Workspace skills override built-ins of the same name. Every skill has one stable path the
model can read, ``skills/<folder>/SKILL.md`` relative to the workspace; for a built-in
skill that the workspace does not override, ``read_file`` resolves that path to the
package's copy (read-only: writing there creates a workspace override). A skill whose
requirements are missing is still listed, with the reason, so the model can tell the user
what to install.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from lucidgate.memory.frontmatter import parse_frontmatter
from lucidgate.memory.gitpaths import printable_name, representable

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    path: Path
    body: str
    always: bool = False
    missing: tuple[str, ...] = ()
    builtin: bool = False

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def folder(self) -> str:
        return self.path.parent.name

    @property
    def virtual_path(self) -> str:
        """The path the model reads it by, relative to the workspace (see the module doc)."""
        return f"skills/{self.folder}/SKILL.md"

    @property
    def source(self) -> str:
        return "built-in" if self.builtin else "workspace"

    @property
    def status(self) -> str:
        return "available" if self.available else "unavailable: needs " + ", ".join(self.missing)


ConfigCheck = Callable[[str], bool]
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_OS_NAMES = {"linux": "linux", "darwin": "darwin", "macos": "darwin", "win32": "win32", "windows": "win32"}


def _metadata_sections(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Our own top-level keys, then nanobot's and OpenClaw's blocks under ``metadata``."""
    sections = [meta]
    raw = meta.get("metadata")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if isinstance(raw, dict):
        for key in ("nanobot", "openclaw", "clawdbot"):
            if isinstance(raw.get(key), dict):
                sections.append(raw[key])
    return sections


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def missing_requirements(meta: dict[str, Any], config_check: ConfigCheck | None = None) -> tuple[str, ...]:
    """What this machine lacks for the skill, in words a user can act on."""
    missing: list[str] = []
    for section in _metadata_sections(meta):
        requires = section.get("requires")
        if isinstance(requires, dict):
            missing += [f"binary {b}" for b in _strings(requires.get("bins")) if shutil.which(b) is None]
            any_bins = _strings(requires.get("anyBins"))
            if any_bins and not any(shutil.which(b) for b in any_bins):
                missing.append("one of the binaries " + ", ".join(any_bins))
            missing += [f"env {e}" for e in _strings(requires.get("env")) if not os.environ.get(e)]
            for key in _strings(requires.get("config")):
                if config_check is None or not config_check(key):
                    missing.append(f"config {key}")
        systems = [_OS_NAMES.get(o.lower(), o.lower()) for o in _strings(section.get("os"))]
        if systems and sys.platform not in systems and not (sys.platform.startswith("linux") and "linux" in systems):
            missing.append(f"os {' or '.join(systems)} (this is {sys.platform})")
    return tuple(dict.fromkeys(missing))


def _always(meta: dict[str, Any]) -> bool:
    return any(bool(section.get("always")) for section in _metadata_sections(meta))


def config_checker(config: Any) -> ConfigCheck:
    """``requires.config`` keys as dotted paths into our config (camelCase or snake_case)."""
    data = config.model_dump(mode="json", by_alias=True)

    def check(key: str) -> bool:
        node: Any = data
        for part in key.split("."):
            if not isinstance(node, dict):
                return False
            camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), part)
            node = node.get(part, node.get(camel))
        return bool(node)

    return check


def parse_skill(path: Path, *, builtin: bool = False, config_check: ConfigCheck | None = None) -> Skill | None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    parsed = parse_frontmatter(text)
    if parsed.error:
        logger.warning("skill %s has invalid frontmatter: %s", path, parsed.error)
    meta = parsed.meta or {}
    body = parsed.body
    name = str(meta.get("name") or path.parent.name)
    description = " ".join(str(meta.get("description") or "").split()) or "(no description)"
    return Skill(name=name, description=description, path=path, body=body, always=_always(meta),
                 missing=missing_requirements(meta, config_check), builtin=builtin)


def builtin_skills_dir() -> Path:
    return Path(str(resources.files("lucidgate.gateway.skills").joinpath("builtin")))


def builtin_skill_file(workspace: Path, raw: str, builtin_dir: Path | None = None) -> Path | None:
    """The package file behind a virtual ``skills/<folder>/...`` path, or None.

    Only when the workspace has no file of its own there (the workspace wins), and only
    inside that built-in skill's folder (``..`` and symlinks cannot leave it)."""
    text = raw.strip().replace("\\", "/")
    while text.startswith("./"):
        text = text[2:]
    parts = PurePosixPath(text).parts
    if len(parts) < 3 or parts[0] != "skills" or ".." in parts or text.startswith("/"):
        return None
    if (workspace / text).exists():
        return None
    folder = (builtin_dir or builtin_skills_dir()).resolve() / parts[1]
    candidate = folder.joinpath(*parts[2:]).resolve()
    if not candidate.is_relative_to(folder) or not candidate.is_file():
        return None
    return candidate


class SkillsLoader:
    def __init__(self, workspace: Path, builtin_dir: Path | None = None, *,
                 config_check: ConfigCheck | None = None) -> None:
        self.workspace_dir = workspace / "skills"
        self.builtin_dir = builtin_dir or builtin_skills_dir()
        self.config_check = config_check

    def load(self) -> list[Skill]:
        """All skills, workspace first overriding built-ins, sorted by name (stable prompt)."""
        found: dict[str, Skill] = {}
        for folder, builtin in ((self.builtin_dir, True), (self.workspace_dir, False)):
            if not folder.is_dir():
                continue
            for skill_file in sorted(folder.glob("*/SKILL.md")):
                if not representable(skill_file.parent.name):  # the prompt could not name it
                    logger.warning("skill folder %s has a name that is not UTF-8; skipped (rename it)",
                                   printable_name(str(skill_file.parent)))
                    continue
                skill = parse_skill(skill_file, builtin=builtin, config_check=self.config_check)
                if skill is not None:
                    found[skill.name] = skill
        return [found[name] for name in sorted(found)]

    def signature(self) -> tuple:
        """Cheap change detector: the skill files and their mtimes.

        Runs before every turn, so it uses ``os.scandir`` and one ``stat`` per skill
        rather than ``Path.glob`` (whose pattern machinery cost more than the rest of
        the prompt refresh together).
        """
        sig = []
        for folder in (self.builtin_dir, self.workspace_dir):
            try:
                entries = sorted(e.name for e in os.scandir(folder) if e.is_dir())
            except OSError:
                continue
            for name in entries:
                skill_file = os.path.join(folder, name, "SKILL.md")
                try:
                    sig.append((skill_file, os.stat(skill_file).st_mtime_ns))
                except OSError:
                    continue
        return tuple(sig)
