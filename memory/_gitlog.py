"""Reading the memory history: commits, newest first, with the files each one changed.

The commits come from ``git log -z`` (id, short id, time and subject as NUL-separated
fields: a subject can hold any character a file name can, except NUL), and their files
from one ``diff-tree`` for the commits actually shown (``gitpaths.changed_files``), so no
path is ever parsed out of git's human output. What is returned is for showing: a name
from another system that is not UTF-8 has its bytes written as ``\\xNN``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from lucidgate.memory.gitpaths import as_text, changed_files

__all__ = ["CommitInfo", "read_log"]

_FIELDS = 4
_SCAN_WITH_PREFIX = 5000  # commits searched for a message prefix


@dataclass(frozen=True, slots=True)
class CommitInfo:
    sha: str
    short: str
    message: str
    when: datetime
    files: tuple[str, ...]


def read_log(git: Any, n: int, *, prefix: str | None = None) -> list[CommitInfo]:
    """The newest ``n`` commits of HEAD (only those whose subject starts with ``prefix``)."""
    limit = max(0, n) if prefix is None else _SCAN_WITH_PREFIX
    fields = git.log("-z", "--format=%H%x00%h%x00%ct%x00%s", f"-n{limit}").split("\0")
    heads: list[tuple[str, str, str, str]] = []
    for at in range(0, len(fields) - _FIELDS + 1, _FIELDS):
        sha, short, stamp, subject = fields[at:at + _FIELDS]
        if prefix is None or subject.startswith(prefix):
            heads.append((sha, short, stamp, subject))
    heads = heads[:max(0, n)]
    files = changed_files(git, [sha for sha, *_ in heads])
    return [CommitInfo(sha=sha, short=short, message=as_text(subject),
                       when=datetime.fromtimestamp(int(stamp), tz=timezone.utc),
                       files=tuple(as_text(f) for f in files.get(sha, ())))
            for sha, short, stamp, subject in heads]
