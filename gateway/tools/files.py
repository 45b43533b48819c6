"""File tools: read_file, write_file, edit_file, list_dir (DESIGN §8).

Each tool is configured once (``restrict``: confine paths to the workspace) and holds no
per-turn state; the workspace comes from the ``TurnContext``. All file system work runs
in a worker thread so a slow disk never stalls the event loop. Refusals raise
``ToolError`` with a message that tells the model what to do instead.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.skills.catalog import builtin_skill_file
from lucidgate.gateway.tools import _paths
from lucidgate.gateway.tools._forgotten import redact, without_forgotten
from lucidgate.gateway.tools.base import OutsideText, ToolParams
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.textedit import EditError, replace_exact

MAX_LINE_CHARS = 2000
_PATH_HELP = None  # the system prompt says once that file tools resolve paths in the workspace


class _FileTool:
    name: ClassVar[str]
    owner_only: ClassVar[bool] = False

    def __init__(self, *, restrict: bool = True) -> None:
        self.restrict = restrict

    def owner_power(self, ctx: TurnContext, params: ToolParams) -> bool:
        """A write to an owner-only path (blocking: resolves the path)."""
        if self.name not in ("write_file", "edit_file"):
            return False
        raw = getattr(params, "path", "")
        return _paths.owner_only_target(ctx.workspace, str(raw), restrict=self.restrict) is not None

    def _resolve(self, ctx: TurnContext, raw: str, access: _paths.Access) -> tuple[Path, str]:
        path = _paths.resolve(ctx.workspace, raw, restrict=self.restrict, access=access,
                              guest=None if ctx.is_owner else ctx.session_key)
        return path, _paths.display(ctx.workspace.resolve(), path)


# --------------------------------------------------------------------------- read_file


class ReadFile(_FileTool):
    name: ClassVar[str] = "read_file"
    description: ClassVar[str] = "Read a text file with line numbers; page big files with offset/limit."

    class Params(ToolParams):
        path: str = Field(description=_PATH_HELP)
        offset: int = Field(1, ge=1, description="1-based")
        limit: int = Field(2000, ge=1)

    def __init__(self, *, restrict: bool = True, max_chars: int = 12_000, guest_writes: bool = False) -> None:
        super().__init__(restrict=restrict)
        self.max_chars = max_chars
        self.guest_writes = guest_writes  # guests hold write tools: their files are their words

    async def run(self, ctx: TurnContext, params: Params) -> str:
        return await asyncio.to_thread(self._read, ctx, params)

    def _marked(self, ctx: TurnContext, path: Path, shown: str, text: str) -> str:
        if self.guest_writes and _paths.guest_writable(ctx.workspace, path):
            return OutsideText.of(text, f"{shown}, a file guests may write (tools.guestTools)")
        return text

    def _read(self, ctx: TurnContext, params: Params) -> str:
        # A built-in skill is read by its virtual path, skills/<name>/SKILL.md (gateway/skills/catalog.py).
        packaged = builtin_skill_file(ctx.workspace, params.path)
        if packaged is not None:
            path, shown = packaged, params.path.strip()
        else:
            path, shown = self._resolve(ctx, params.path, "read")
        _paths.require_text_file(path, shown)
        budget = max(200, self.max_chars - 200)  # room for the footer
        out: list[str] = []
        used = 0
        first, last, total = params.offset, params.offset - 1, 0
        with open(path, encoding="utf-8", errors="replace") as fh:
            # Keep counting past the shown page: the footer says how many lines there are.
            for number, line in enumerate(fh, 1):
                total = number
                if number < first or number >= first + params.limit or used >= budget:
                    continue
                text = line.rstrip("\n")
                if len(text) > MAX_LINE_CHARS:
                    text = text[:MAX_LINE_CHARS] + f" …[line cut at {MAX_LINE_CHARS} chars]"
                entry = f"{number:>6}\t{text}"
                if out and used + len(entry) + 1 > budget:
                    used = budget
                    continue
                out.append(entry)
                used += len(entry) + 1
                last = number
        if total == 0:
            return self._marked(ctx, path, shown, f"({shown} is empty)")
        if first > total:
            raise ToolError(f"offset {first} is past the end of {shown}, which has {total} lines")
        body = redact(ctx.workspace, "\n".join(out))
        if first > 1 or last < total:
            more = f"; continue with offset={last + 1}" if last < total else ""
            body += f"\n[{shown}: lines {first}-{last} of {total}{more}]"
        return self._marked(ctx, path, shown, body)


# -------------------------------------------------------------------------- write_file


class WriteFile(_FileTool):
    name: ClassVar[str] = "write_file"
    description: ClassVar[str] = "Create or overwrite a file (and its folders); use edit_file for changes."

    class Params(ToolParams):
        path: str = Field(description=_PATH_HELP)
        content: str

    async def run(self, ctx: TurnContext, params: Params) -> str:
        return await asyncio.to_thread(self._write, ctx, params)

    def _write(self, ctx: TurnContext, params: Params) -> str:
        check_new_name(params.path)
        path, shown = self._resolve(ctx, params.path, "write")
        if path.is_dir():
            raise ToolError(f"{shown} is a directory; give a file path")
        existed = path.exists()
        data = without_forgotten(ctx.workspace, path, params.content).encode("utf-8")
        _paths.atomic_write(path, data)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {shown} ({len(data)} bytes)"


# --------------------------------------------------------------------------- edit_file


class EditFile(_FileTool):
    name: ClassVar[str] = "edit_file"
    description: ClassVar[str] = "Replace exact text in a file; old_text must be unique unless replace_all."

    class Params(ToolParams):
        path: str = Field(description=_PATH_HELP)
        old_text: str = Field(min_length=1)
        new_text: str
        replace_all: bool = False

    async def run(self, ctx: TurnContext, params: Params) -> str:
        return await asyncio.to_thread(self._edit, ctx, params)

    def _edit(self, ctx: TurnContext, params: Params) -> str:
        path, shown = self._resolve(ctx, params.path, "write")
        text = _paths.read_text_strict(path, shown)
        try:
            updated, replaced = replace_exact(text, params.old_text, params.new_text, shown=shown,
                                              replace_all=params.replace_all)
        except EditError as exc:
            raise ToolError(str(exc)) from None
        _paths.atomic_write(path, without_forgotten(ctx.workspace, path, updated).encode("utf-8"))
        return f"Edited {shown}: replaced {replaced} occurrence{'s' if replaced > 1 else ''}"


# ---------------------------------------------------------------------------- list_dir


class ListDir(_FileTool):
    name: ClassVar[str] = "list_dir"
    description: ClassVar[str] = "List a directory (folders end with /, files show sizes)."

    class Params(ToolParams):
        path: str = Field(".", description=_PATH_HELP)
        depth: int = Field(1, ge=1, le=5)

    def __init__(self, *, restrict: bool = True, max_entries: int = 200) -> None:
        super().__init__(restrict=restrict)
        self.max_entries = max_entries

    async def run(self, ctx: TurnContext, params: Params) -> str:
        return await asyncio.to_thread(self._list, ctx, params)

    def _list(self, ctx: TurnContext, params: Params) -> str:
        # "" is what models send for "no particular folder": the default, the workspace.
        path, shown = self._resolve(ctx, params.path if params.path.strip() else ".", "list")
        if not path.exists():
            raise ToolError(f"{shown} does not exist")
        if not path.is_dir():
            raise ToolError(f"{shown} is a file, not a directory; use read_file to read it")
        out: list[str] = []
        complete = self._walk(path, params.depth, 0, out)
        if not out:
            return f"({shown} is empty)"
        if not complete:
            out.append(f"[stopped at {self.max_entries} entries; list a subfolder to see more]")
        return "\n".join(out)

    def _walk(self, folder: Path, depth: int, level: int, out: list[str]) -> bool:
        """Append entries of ``folder``; False when the entry cap cut the listing short."""
        try:
            entries = sorted(os.scandir(folder), key=lambda e: (not _is_dir(e), e.name.lower()))
        except PermissionError:
            out.append(f"{'  ' * level}(permission denied)")
            return True
        indent = "  " * level
        for entry in entries:
            if entry.name == ".git":
                continue
            if len(out) >= self.max_entries:
                return False
            if entry.is_symlink():
                out.append(f"{indent}{entry.name} -> {_readlink(entry.path)}")
            elif entry.is_dir():
                skipped = entry.name in _paths.SKIP_DIRS
                out.append(f"{indent}{entry.name}/" + (" (not expanded)" if skipped else ""))
                if level + 1 < depth and not skipped:
                    if not self._walk(Path(entry.path), depth, level + 1, out):
                        return False
            else:
                out.append(f"{indent}{entry.name}  {_size(entry)}")
        return True


def _is_dir(entry: os.DirEntry[str]) -> bool:
    return entry.is_dir(follow_symlinks=False)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _size(entry: os.DirEntry[str]) -> str:
    try:
        size = float(entry.stat(follow_symlinks=False).st_size)
    except OSError:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "?"


def check_new_name(raw: str) -> None:
    """Refuse names a person could not type back or see: control characters (a newline or
    an escape in a file name breaks listings, shells and git) and backslashes (a Windows
    separator here would become part of one odd file name, not a folder)."""
    for char in raw:
        if ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0:  # C0, DEL and C1 controls
            raise ToolError(
                f"path {raw!r} contains a control character (U+{ord(char):04X}); file and "
                "folder names must be printable"
            )
    if "\\" in raw:
        raise ToolError(
            f"path {raw!r} contains a backslash; separate folders with '/', e.g. "
            f"{raw.replace(chr(92), '/')!r}"
        )
