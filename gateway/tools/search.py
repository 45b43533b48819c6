"""The grep tool: regex search over the workspace's text files (DESIGN §8).

The ``regex`` package in a worker thread, so the event loop never waits on the disk or a
slow pattern: matching releases the GIL (``concurrent=True``) and every match has a
deadline (``timeout=``), so a catastrophic pattern such as ``(a|aa)+$`` on a long line
ends as a clear tool error instead of freezing a core — and, through the GIL, the gateway.
Results are bounded (matches, line length, files scanned) because every match costs
prompt tokens; ``output="files"`` (paths only) and ``"count"`` (matching lines per file) are
the cheap first look at a broad search, the default ``"lines"`` shows the lines. Binary
files, ``.git`` and the gateway's internal files (session transcripts, inbox) are skipped:
the same confinement as the file tools.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import regex
from pydantic import Field

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools import _paths
from lucidgate.gateway.tools.base import OutsideText, ToolParams
from lucidgate.gateway.tools.turn import TurnContext

MAX_SHOWN_LINE = 300
MAX_FILE_BYTES = 5 * 1024 * 1024


class Grep:
    name: ClassVar[str] = "grep"
    description: ClassVar[str] = ("Search text files for a Python regex; output lines (path:line: "
                                  "text, the default), files or count.")
    owner_only: ClassVar[bool] = False

    class Params(ToolParams):
        pattern: str
        path: str = "."
        glob: str = Field("", description="e.g. *.py")
        ignore_case: bool = False
        output: Literal["lines", "files", "count"] = "lines"

    def __init__(self, *, restrict: bool = True, max_matches: int = 100, max_files_listed: int = 500,
                 max_files: int = 5000, time_limit_s: float = 10.0, guest_writes: bool = False) -> None:
        self.restrict = restrict
        self.guest_writes = guest_writes  # guests hold write tools: matches in their files are their words
        self.max_matches = max_matches
        self.max_files_listed = max_files_listed
        self.max_files = max_files
        self.time_limit_s = time_limit_s

    async def run(self, ctx: TurnContext, params: Params) -> str:
        if not params.pattern:
            raise ToolError("pattern is empty")
        try:
            compiled = regex.compile(params.pattern, regex.IGNORECASE if params.ignore_case else 0)
        except regex.error as exc:
            raise ToolError(f"invalid regex {params.pattern!r}: {exc}") from None
        return await asyncio.to_thread(self._search, ctx, params, compiled)

    def _search(self, ctx: TurnContext, params: Params, compiled: regex.Pattern[str]) -> str:
        root = ctx.workspace.resolve()
        guest = None if ctx.is_owner else ctx.session_key
        start = _paths.resolve(ctx.workspace, params.path, restrict=self.restrict, access="read", guest=guest)
        if not start.exists():
            raise ToolError(f"{params.path!r} does not exist")
        deadline = time.monotonic() + self.time_limit_s
        hits: list[str] = []
        theirs = ""  # the first matching file a guest may have written
        total = 0  # matching lines, in files/count mode
        scanned = 0
        stopped = ""
        for file in self._files(root, start, params.glob, guest):
            if scanned >= self.max_files:
                stopped = f"stopped after {self.max_files} files; narrow path or glob"
                break
            if time.monotonic() > deadline:
                stopped = f"stopped after {self.time_limit_s:g} s; narrow path or glob"
                break
            scanned += 1
            shown = _paths.display(root, file)
            if params.output != "lines":
                found = sum(1 for _ in _matching_lines(file, compiled, deadline, self.time_limit_s, shown))
                if found:
                    hits.append(shown if params.output == "files" else f"{shown}: {found}")
                    total += found
                if len(hits) >= self.max_files_listed:
                    stopped = f"showing the first {self.max_files_listed} files; narrow the search"
                    break
                continue
            for number, line in _matching_lines(file, compiled, deadline, self.time_limit_s, shown):
                if len(hits) >= self.max_matches:
                    stopped = f"showing the first {self.max_matches} matches; narrow the search"
                    break
                if self.guest_writes and not theirs and _paths.guest_writable(ctx.workspace, file):
                    theirs = shown
                text = line if len(line) <= MAX_SHOWN_LINE else line[:MAX_SHOWN_LINE] + "…"
                hits.append(f"{shown}:{number}: {text}")
            if len(hits) >= self.max_matches and stopped:
                break
        if not hits:
            where = "" if params.path == "." else f" in {params.path}"
            suffix = f" ({stopped})" if stopped else ""
            return f"No matches for {params.pattern!r}{where}{suffix}."
        if params.output == "count":
            hits.append(f"[{total} matching line(s) in {len(hits)} file(s)]")
        if stopped:
            hits.append(f"[{stopped}]")
        if theirs:
            return OutsideText.of("\n".join(hits), f"grep matches in {theirs}, a file guests may write")
        return "\n".join(hits)

    def _files(self, root: Path, start: Path, glob: str, guest: str | None) -> Iterator[Path]:
        """Candidate files under ``start``, sorted for stable output, internal files skipped."""
        if start.is_file():
            yield start
            return
        for folder, dirs, files in os.walk(start):
            dirs[:] = sorted(d for d in dirs if d not in _paths.SKIP_DIRS)
            base = Path(folder)
            for name in sorted(files):
                path = base / name
                if glob and not _glob_match(_paths.display(root, path), name, glob):
                    continue
                if path.is_symlink():
                    # Followed only if its target is an allowed file: no escape by symlink.
                    try:
                        _paths.resolve(root, str(path), restrict=self.restrict, access="read", guest=guest)
                    except ToolError:
                        continue
                elif _paths.internal_reason(root, path, "read", guest=guest):
                    continue
                yield path


def _glob_match(relative: str, name: str, glob: str) -> bool:
    # A pattern without "/" matches the file name anywhere; with "/", the relative path.
    return fnmatch.fnmatch(relative if "/" in glob else name, glob)


def _matching_lines(path: Path, compiled: regex.Pattern[str], deadline: float, limit_s: float,
                    shown: str) -> Iterator[tuple[int, str]]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES or _paths.is_binary(path):
            return
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                line = line.rstrip("\n")
                try:
                    found = compiled.search(line, timeout=max(0.001, deadline - time.monotonic()),
                                            concurrent=True)
                except TimeoutError:
                    raise ToolError(
                        f"the pattern took more than {limit_s:g} s (stopped at {shown}:{number}); it "
                        "backtracks too much — avoid nested repetition such as (a|aa)+ or (\\w+\\s?)*"
                    ) from None
                if found:
                    yield number, line
    except OSError:
        return
