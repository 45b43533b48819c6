"""Installing a skill into the workspace (``lucid skills add PATH``).

The source is a folder holding ``SKILL.md`` or a local ``.zip`` / ``.tar.gz`` / ``.tgz``
archive of one (at its root or in a single top-level folder). Nothing is fetched from the
network. The skill is validated before anything is written: frontmatter that parses, a
``name`` of lowercase letters, digits and dashes, a ``description``. Archives are unpacked
into a temporary folder with every member checked (no absolute paths, no ``..``, no links,
no devices, a size cap), and the result is moved into ``workspace/skills/<name>`` in one
rename. An existing skill of that name is replaced only with ``force``.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from lucidgate.config.errors import LucidError
from lucidgate.gateway.skills.catalog import NAME_RE, Skill, parse_skill
from lucidgate.memory.frontmatter import parse_frontmatter

MAX_UNPACKED_BYTES = 50 * 1024 * 1024


class SkillInstallError(LucidError):
    """The skill could not be installed; nothing in the workspace was changed."""


@dataclass(frozen=True, slots=True)
class Installed:
    skill: Skill
    replaced: bool


def validate(folder: Path) -> Skill:
    """The skill in ``folder``, or ``SkillInstallError`` saying what to fix."""
    path = folder / "SKILL.md"
    if not path.is_file():
        raise SkillInstallError(f"{folder} has no SKILL.md")
    parsed = parse_frontmatter(path.read_text(encoding="utf-8", errors="replace"))
    if parsed.meta is None:
        if parsed.error is None:
            raise SkillInstallError(f"{path} has no frontmatter (it must start with a '---' line)")
        if parsed.error.startswith("invalid YAML"):
            raise SkillInstallError(f"{path}: the frontmatter is not valid YAML ({parsed.error})")
        raise SkillInstallError(f"{path}: {parsed.error}")
    meta = parsed.meta
    name = str(meta.get("name") or "").strip()
    if not NAME_RE.match(name):
        raise SkillInstallError(f"{path}: 'name' must be lowercase letters, digits and dashes "
                                f"(got {name!r})")
    if not str(meta.get("description") or "").strip():
        raise SkillInstallError(f"{path}: 'description' is missing; the model chooses skills by it")
    skill = parse_skill(path)
    assert skill is not None
    return skill


def install(source: Path, workspace: Path, *, force: bool = False) -> Installed:
    """Validate ``source`` and copy it to ``workspace/skills/<name>`` (blocking)."""
    if not source.exists():
        raise SkillInstallError(f"{source} does not exist")
    skills_dir = workspace / "skills"
    skills_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=skills_dir, prefix=".install-") as tmp:
        staging = Path(tmp) / "skill"
        if source.is_dir():
            shutil.copytree(source, staging, symlinks=False,
                            ignore=shutil.ignore_patterns(".git", "__pycache__"))
        else:
            _unpack(source, Path(tmp) / "unpacked")
            _single_skill_folder(Path(tmp) / "unpacked").rename(staging)
        skill = validate(staging)
        target = skills_dir / skill.name
        replaced = target.exists()
        if replaced and not force:
            raise SkillInstallError(f"a skill named {skill.name!r} is already installed at {target}; "
                                    "use --force to replace it")
        if replaced:
            target.rename(Path(tmp) / "old")  # removed with the temporary folder
        staging.rename(target)
    installed = parse_skill(target / "SKILL.md")
    assert installed is not None
    return Installed(installed, replaced)


def _single_skill_folder(root: Path) -> Path:
    if (root / "SKILL.md").is_file():
        return root
    entries = [p for p in root.iterdir() if not p.name.startswith(".") and p.name != "__MACOSX"]
    if len(entries) == 1 and (entries[0] / "SKILL.md").is_file():
        return entries[0]
    raise SkillInstallError("the archive must hold SKILL.md at its root or in one top-level folder")


def _safe_member(name: str) -> PurePosixPath:
    member = PurePosixPath(name.replace("\\", "/"))
    if member.is_absolute() or ".." in member.parts:
        raise SkillInstallError(f"the archive has an unsafe path {name!r}; refusing to unpack it")
    return member


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir()
    total = 0
    lower = archive.name.lower()
    if lower.endswith(".zip"):
        try:
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    member = _safe_member(info.filename)
                    if (info.external_attr >> 16) & 0o170000 == 0o120000:
                        raise SkillInstallError(f"the archive has a symbolic link {info.filename!r}")
                    total += info.file_size
                    if total > MAX_UNPACKED_BYTES:
                        raise SkillInstallError("the archive unpacks to more than 50 MB")
                    out = dest.joinpath(*member.parts)
                    if info.is_dir():
                        out.mkdir(parents=True, exist_ok=True)
                        continue
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, open(out, "wb") as fh:
                        shutil.copyfileobj(src, fh)
        except zipfile.BadZipFile as exc:
            raise SkillInstallError(f"{archive} is not a valid zip file ({exc})") from None
        return
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(archive) as tf:
                for ti in tf.getmembers():
                    _safe_member(ti.name)
                    if not (ti.isfile() or ti.isdir()):
                        raise SkillInstallError(f"the archive has a link or special file {ti.name!r}")
                    total += ti.size
                    if total > MAX_UNPACKED_BYTES:
                        raise SkillInstallError("the archive unpacks to more than 50 MB")
                tf.extractall(dest, filter="data")
        except tarfile.TarError as exc:
            raise SkillInstallError(f"{archive} is not a valid tar archive ({exc})") from None
        return
    raise SkillInstallError(f"{archive} is neither a folder nor a .zip, .tar.gz or .tgz archive")
