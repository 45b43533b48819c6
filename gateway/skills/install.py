"""Installing a skill into the workspace (``lucid skills add PATH``).

The source is a folder holding ``SKILL.md`` or a local ``.zip`` / ``.tar.gz`` / ``.tgz``
archive of one (at its root or in a single top-level folder). Nothing is fetched from the
network. The skill is validated before anything is written: frontmatter that parses, a
``name`` of lowercase letters, digits and dashes, a ``description``. Archives are unpacked
into a temporary folder with every member checked (no absolute paths, no ``..``, no links,
no devices, a size cap), and the result is moved into ``workspace/skills/<name>`` in one
rename. An existing skill of that name is replaced only with ``force``.

A folder is held to the same rule as an archive: a symbolic link anywhere inside it, a file
hard-linked to something outside it, or a device, FIFO or socket refuses the install. Skills
are readable by guests and land in the system prompt, so copying what a link points at
(``notes.md -> ~/.lucidgate/config.json``) would publish the owner's credentials.
"""

from __future__ import annotations

import os
import shutil
import stat
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
            _copy_folder(source, staging)
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


_NOT_COPIED = frozenset({".git", "__pycache__"})
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _plain_tree(source: Path) -> tuple[list[Path], dict[Path, tuple[int, int]]]:
    """The folders and files below ``source`` (relative), or ``SkillInstallError`` naming the
    first link or special file. ``.git`` and ``__pycache__`` are left out unread. Files come
    with their (device, inode), for the check on the open descriptor."""
    folders: list[Path] = []
    files: dict[Path, tuple[int, int]] = {}
    names: dict[tuple[int, int], int] = {}
    hard: dict[tuple[int, int], tuple[Path, int]] = {}
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _NOT_COPIED)
        for name in [*dirnames, *sorted(filenames)]:
            rel = (here / name).relative_to(source)
            info = (here / name).lstat()
            if stat.S_ISLNK(info.st_mode):
                raise SkillInstallError(f"{source} has a symbolic link {rel.as_posix()!r}; links are never "
                                        "installed (replace it with the file itself)")
            if stat.S_ISDIR(info.st_mode):
                folders.append(rel)
            elif not stat.S_ISREG(info.st_mode):
                raise SkillInstallError(f"{source} has a special file {rel.as_posix()!r} (a device, FIFO or "
                                        "socket); only plain files are installed")
            else:
                inode = (info.st_dev, info.st_ino)
                files[rel] = inode
                names[inode] = names.get(inode, 0) + 1
                hard[inode] = (rel, info.st_nlink)
    for inode, (rel, links) in hard.items():
        if links > names[inode]:
            raise SkillInstallError(f"{source} has {rel.as_posix()!r}, a hard link to a file outside the "
                                    "folder; copy the file in instead of linking it")
    return folders, files


def _copy_folder(source: Path, staging: Path) -> None:
    """Copy the plain files of ``source`` into ``staging`` (new); links refuse the install.

    Each file is opened without following links and checked again on the open descriptor, so
    a file swapped for a link between the walk and the read is refused too."""
    folders, files = _plain_tree(source)
    staging.mkdir()
    for rel in folders:
        (staging / rel).mkdir()
    total = 0
    for rel, inode in files.items():
        try:
            fd = os.open(source / rel, _OPEN_FLAGS)
        except OSError as exc:
            raise SkillInstallError(f"{source}: {rel.as_posix()!r} cannot be opened safely "
                                    f"({exc.strerror})") from None
        with os.fdopen(fd, "rb") as src:
            info = os.fstat(src.fileno())
            if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != inode:
                raise SkillInstallError(f"{source}: {rel.as_posix()!r} changed into a link or a special "
                                        "file while it was copied")
            total += info.st_size
            if total > MAX_UNPACKED_BYTES:
                raise SkillInstallError(f"{source} holds more than 50 MB")
            with open(staging / rel, "wb") as out:
                shutil.copyfileobj(src, out)
        os.chmod(staging / rel, stat.S_IMODE(info.st_mode) & 0o755)


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
