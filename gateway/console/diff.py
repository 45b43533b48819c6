"""Split ``git show`` output into files, hunks and typed lines for the page to colour.

A patch's ``diff --git`` header quotes a name holding quotes, tabs or newlines, and a name
containing `` b/`` cannot be split from it at all; so the caller passes the commit's files
(``GitStore.changes``: status and name, in the patch's order) and each section takes its
name and status from there. Without them the headers are read as before.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

_STATUS = {"A": "added", "D": "deleted"}
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


class DiffLine(BaseModel):
    op: str  # "+", "-" or " "
    text: str
    old: int | None
    new: int | None


class DiffHunk(BaseModel):
    header: str
    lines: list[DiffLine]


class FileDiff(BaseModel):
    path: str
    status: str  # "modified", "added", "deleted"
    hunks: list[DiffHunk]


def parse_patch(patch: str, changes: list[tuple[str, str]] | None = None) -> list[FileDiff]:
    files: list[FileDiff] = []
    lines = patch.split("\n")  # git's separator only: a line may hold \r, \f or U+2028
    sections = sum(1 for line in lines if line.startswith("diff --git "))
    named = changes if changes is not None and len(changes) == sections else None
    current: FileDiff | None = None
    hunk: DiffHunk | None = None
    old = new = 0
    for line in lines:
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            current = FileDiff(path=parts[1] if len(parts) == 2 else line[11:], status="modified", hunks=[])
            if named is not None:
                status, current.path = named[len(files)]
                current.status = _STATUS.get(status, "modified")
            files.append(current)
            hunk = None
            continue
        if current is None:
            continue
        if hunk is None and named is None:
            if line.startswith("new file mode"):
                current.status = "added"
            elif line.startswith("deleted file mode"):
                current.status = "deleted"
            elif line.startswith("+++ b/"):
                current.path = line[6:]
        match = _HUNK.match(line)
        if match:
            old, new = int(match.group(1)), int(match.group(2))
            hunk = DiffHunk(header=line, lines=[])
            current.hunks.append(hunk)
            continue
        if hunk is None or not line or line[0] not in "+- ":
            continue  # headers, "\ No newline at end of file"
        op = line[0]
        hunk.lines.append(DiffLine(op=op, text=line[1:], old=None if op == "+" else old,
                                   new=None if op == "-" else new))
        if op != "+":
            old += 1
        if op != "-":
            new += 1
    return files
