"""A stamp that says "the memory files are as the last full commit left them", from stat() alone.

Every start (the daemon, a one-shot ``lucid agent``) commits hand edits made while lucid was
down; finding out costs GitPython's import and a few git processes. After a commit of every
tracked file (``GitStore.commit_manual_edits``) the files' sizes and mtimes, and the refs of the
branch, are written to ``.git/lucid-stamp``. While all of them still match, nothing can have
changed and the start skips git entirely. A write to a tracked file, a new or deleted one, a
commit by anyone (the ref files move), a replaced or deleted ``.git`` (the stamp goes with it):
each makes them differ, and the full check runs.

The files' part is taken *before* staging, so a write racing the commit leaves a stale stamp
(one extra check later), never a stamp that hides an uncommitted edit. A file changed in the
last two seconds gets no stamp at all: file times are coarse, and a same-size edit within the
same tick would look unchanged (git's own "racy" rule).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from lucidgate.config.fileio import atomic_write_text

STAMP = "lucid-stamp"
_REFS = ("HEAD", "refs/heads/main", "packed-refs")
RACY_NS = 2_000_000_000


def _stat(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def files_part(workspace: Path, tracked: Iterable[str]) -> dict[str, list[int] | None]:
    """Size and mtime of every tracked file (directories walked), keyed by relative path."""
    out: dict[str, list[int] | None] = {}
    for rel in tracked:
        path = workspace / rel
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    full = Path(root) / name
                    out[full.relative_to(workspace).as_posix()] = _stat(full)
        else:
            out[rel] = _stat(path)
    return out


def current(workspace: Path, files: dict[str, list[int] | None]) -> str:
    """The stamp for ``files`` (taken before the commit) and the refs as they are now."""
    git = workspace / ".git"
    return json.dumps({"files": files, "refs": {r: _stat(git / r) for r in _REFS}}, sort_keys=True)


def read(workspace: Path) -> str | None:
    try:
        return (workspace / ".git" / STAMP).read_text(encoding="utf-8")
    except OSError:
        return None


def write(workspace: Path, files: dict[str, list[int] | None]) -> None:
    """Stamp the state after a full commit whose staging saw ``files``."""
    recent = time.time_ns() - RACY_NS
    if any(st is not None and st[1] > recent for st in files.values()):
        drop(workspace)
    elif (workspace / ".git").is_dir():
        atomic_write_text(workspace / ".git" / STAMP, current(workspace, files))


def drop(workspace: Path) -> None:
    """Forget the stamp (the next start checks with git)."""
    try:
        (workspace / ".git" / STAMP).unlink(missing_ok=True)
    except OSError:
        pass
