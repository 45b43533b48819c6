"""Skills: ``skills/<name>/SKILL.md`` with YAML frontmatter (DESIGN §6).

Frontmatter keys: ``name``, ``description``, ``always`` (inline the full text in every
prompt), ``requires: {bins: [...], env: [...]}``. Workspace skills override built-ins of
the same name. A skill whose requirements are missing is still listed, with the reason,
so the model can tell the user what to install.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from memory.frontmatter import parse_frontmatter

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


def parse_skill(path: Path, *, builtin: bool = False) -> Skill | None:
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
    raw_requires = meta.get("requires")
    requires: dict = raw_requires if isinstance(raw_requires, dict) else {}
    missing = tuple(
        [f"binary {b}" for b in requires.get("bins") or [] if shutil.which(str(b)) is None]
        + [f"env {e}" for e in requires.get("env") or [] if not os.environ.get(str(e))]
    )
    return Skill(name=name, description=description, path=path, body=body,
                 always=bool(meta.get("always")), missing=missing, builtin=builtin)


def builtin_skills_dir() -> Path:
    return Path(str(resources.files("gateway").joinpath("skills")))


class SkillsLoader:
    def __init__(self, workspace: Path, builtin_dir: Path | None = None) -> None:
        self.workspace_dir = workspace / "skills"
        self.builtin_dir = builtin_dir or builtin_skills_dir()

    def load(self) -> list[Skill]:
        """All skills, workspace first overriding built-ins, sorted by name (stable prompt)."""
        found: dict[str, Skill] = {}
        for folder, builtin in ((self.builtin_dir, True), (self.workspace_dir, False)):
            if not folder.is_dir():
                continue
            for skill_file in sorted(folder.glob("*/SKILL.md")):
                skill = parse_skill(skill_file, builtin=builtin)
                if skill is not None:
                    found[skill.name] = skill
        return [found[name] for name in sorted(found)]

    def signature(self) -> tuple:
        """Cheap change detector: the skill files and their mtimes."""
        sig = []
        for folder in (self.builtin_dir, self.workspace_dir):
            if folder.is_dir():
                for skill_file in sorted(folder.glob("*/SKILL.md")):
                    try:
                        sig.append((str(skill_file), skill_file.stat().st_mtime_ns))
                    except OSError:
                        continue
        return tuple(sig)
