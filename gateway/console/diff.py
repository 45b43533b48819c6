"""Split ``git show`` output into files, hunks and typed lines for the page to colour."""

from __future__ import annotations

import re

from pydantic import BaseModel

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


def parse_patch(patch: str) -> list[FileDiff]:
    files: list[FileDiff] = []
    current: FileDiff | None = None
    hunk: DiffHunk | None = None
    old = new = 0
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            current = FileDiff(path=parts[1] if len(parts) == 2 else line[11:], status="modified", hunks=[])
            files.append(current)
            hunk = None
            continue
        if current is None:
            continue
        if hunk is None:
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
