"""Reading another assistant's files without being led anywhere else.

An import source is someone else's folder (or archive). Whatever it holds must not make us
read a file outside it — a ``MEMORY.md`` that is a symbolic link to our config would copy the
API key into the workspace, where guests and git see it. So every file an importer reads or
copies goes through ``SourceFiles``, which refuses, with a warning naming the path:

- symbolic links anywhere below the source root (the file or a folder on its way),
- hard links (``st_nlink > 1``: the same bytes live somewhere we were not asked to read),
- anything that is not a regular file (FIFOs, sockets, devices — a FIFO would hang us),
- anything whose resolved path is not inside the root it was found under,
- a name that is not UTF-8 text (another system's encoding): nothing could name it afterwards.

Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked again on the open descriptor,
so a swap between the check and the read is caught. What is copied is written ``0600``
(folders ``0700``): an import is private until the owner decides otherwise.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lucidgate.config.fileio import atomic_write_bytes
from lucidgate.memory.gitpaths import printable_name, representable

__all__ = ["SourceFiles", "copy_private"]

PRIVATE_DIR = 0o700


class SourceFiles:
    """Checked reads below one or more source roots; refusals are appended to ``warnings``."""

    def __init__(self, *roots: Path, warnings: list[str]) -> None:
        self.roots = [Path(os.path.abspath(r)) for r in roots]
        self.warnings = warnings

    def _root_of(self, path: Path) -> Path | None:
        absolute = Path(os.path.abspath(path))
        return next((r for r in self.roots if absolute == r or absolute.is_relative_to(r)), None)

    def refusal(self, path: Path, *, folder: bool = False) -> str | None:
        """Why ``path`` may not be read (None: it may). Missing paths are not refused."""
        root = self._root_of(path)
        if root is None:
            return "it is outside the source"
        absolute = Path(os.path.abspath(path))
        if not representable(absolute.relative_to(root).as_posix()):
            return "its name is not UTF-8 text (rename it and import again)"
        current = root
        for part in absolute.relative_to(root).parts:
            current = current / part
            try:
                info = current.lstat()
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(info.st_mode):
                return "it is a symbolic link" if current == absolute else f"{current.name}/ is a symbolic link"
        info = absolute.lstat()
        if folder:
            if not stat.S_ISDIR(info.st_mode):
                return "it is not a folder"
        elif not stat.S_ISREG(info.st_mode):
            return "it is not a regular file (a device, FIFO or socket)"
        elif info.st_nlink > 1:
            return "it is a hard link"
        if not absolute.resolve().is_relative_to(root.resolve()):
            return "it resolves outside the source"
        return None

    def _refuse(self, path: Path, reason: str) -> None:
        self.warnings.append(f"refused {printable_name(str(path))}: {reason}")

    def is_dir(self, path: Path) -> bool:
        """A real folder inside the source (a linked one is refused with a warning)."""
        if not os.path.lexists(path):
            return False
        reason = self.refusal(path, folder=True)
        if reason is not None:
            self._refuse(path, reason)
            return False
        return True

    def is_file(self, path: Path) -> bool:
        """A plain file inside the source (anything else that exists is refused, with a warning)."""
        if not os.path.lexists(path):
            return False
        reason = self.refusal(path)
        if reason is not None:
            self._refuse(path, reason)
            return False
        return True

    def read_bytes(self, path: Path) -> bytes | None:
        """The file's bytes, or None when it is missing or refused."""
        if not self.is_file(path):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            self._refuse(path, f"it cannot be opened safely ({exc.strerror})")
            return None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                self._refuse(path, "it changed into a link or a special file while being read")
                return None
            return fh.read()

    def read_text(self, path: Path) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def skill_folders(self, folder: Path) -> list[Path]:
        """Folders of ``folder`` holding a plain ``SKILL.md`` (links refused, with a warning)."""
        if not self.is_dir(folder):
            return []
        found: list[Path] = []
        for path in sorted(folder.iterdir()):
            if os.path.lexists(path / "SKILL.md") or path.is_symlink():
                if self.is_dir(path) and self.is_file(path / "SKILL.md"):
                    found.append(path)
        return found


def copy_private(src: Path, dst: Path, warnings: list[str]) -> list[str]:
    """Copy the folder ``src`` to ``dst`` (new): plain files only, ``0600``; folders ``0700``.

    Links, hard links and special files inside are left out, each with a warning. Returns the
    copied paths relative to ``dst``."""
    files = SourceFiles(src, warnings=warnings)
    copied: list[str] = []
    dst.mkdir(parents=True, mode=PRIVATE_DIR, exist_ok=True)
    os.chmod(dst, PRIVATE_DIR)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        here = Path(dirpath)
        target_dir = dst / here.relative_to(src)
        for name in sorted(dirnames):
            if not files.is_dir(here / name):
                dirnames.remove(name)
                continue
            (target_dir / name).mkdir(mode=PRIVATE_DIR, exist_ok=True)
            os.chmod(target_dir / name, PRIVATE_DIR)
        for name in sorted(filenames):
            data = files.read_bytes(here / name)
            if data is not None:
                atomic_write_bytes(target_dir / name, data)  # 0600
                copied.append((target_dir / name).relative_to(dst).as_posix())
    return copied
