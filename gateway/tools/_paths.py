"""Path confinement and small file helpers shared by the file tools (DESIGN §8, §9).

Every path the model names is taken relative to the turn's workspace. With
``restrictToWorkspace`` on, the path is fully resolved first (symlinks followed, ``..``
normalised) and must land inside the resolved workspace, so neither ``../x``, an absolute
path nor a symlink pointing out can escape. Some files in the workspace are the gateway's
own state (session transcripts, inbox journals, ``state/``, the memory git store); file tools
refuse them for everyone, whatever the role, because a model that edits them corrupts the
daemon and one that reads them leaks other chats. A turn that is not the owner's is also held
to the owner-only table (``_owner_paths``).

These helpers block on the file system: call them from ``asyncio.to_thread``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from lucidgate.config.fileio import atomic_write_bytes
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools._owner_paths import DATABASE_SUFFIXES, Access, owner_only_reason

# Folders no walk descends into (grep, list_dir): internal state or pure noise.
SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache"})
# Written only by the memory pipeline; the model may read them but not write them.
_MEMORY_PIPELINE = frozenset({"memory/history.jsonl", "memory/.cursor", "memory/.dream_cursor"})
_SNIFF_BYTES = 8192


def resolve(workspace: Path, raw: str, *, restrict: bool, access: Access, guest: str | None = None) -> Path:
    """Turn the model's ``raw`` path into an absolute, resolved path it may use.

    ``guest`` is the session key of a guest's turn (None for the owner): a guest never
    reaches the owner's memory or another chat's files, even when granted the file tools.
    Raises ``ToolError`` (with a message the model can act on) for escapes and for the
    gateway's internal files.
    """
    if not raw or not raw.strip():
        raise ToolError("path is empty; give a path relative to the workspace, e.g. 'notes/todo.md'")
    if "\x00" in raw:
        raise ToolError("path contains a NUL character")
    root = workspace.resolve()
    candidate = Path(raw.strip()).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    resolved = candidate.resolve()
    if restrict and not resolved.is_relative_to(root):
        raise ToolError(
            f"{raw!r} is outside the workspace (after resolving '..' and symlinks); "
            "file tools only reach files inside the workspace, use a relative path"
        )
    if guest is not None and (why := _guest_reason(_folded_parts(root, resolved), guest, access)):
        raise ToolError(f"{raw!r} is not available in this chat ({why})")
    reason = internal_reason(root, resolved, access)
    if reason:
        raise ToolError(f"{raw!r} is internal gateway state ({reason}); file tools cannot {access} it")
    return resolved


def owner_only_target(workspace: Path, raw: str, *, restrict: bool) -> str | None:
    """Why writing ``raw`` takes the owner's power: it lands on an owner-only path (or, with
    confinement off, outside the workspace). None for an ordinary workspace file, and for a
    path the tool will refuse anyway (the tool says why)."""
    if not raw or not raw.strip() or "\x00" in raw:
        return None
    root = workspace.resolve()
    candidate = Path(raw.strip()).expanduser()
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if not resolved.is_relative_to(root):
        return None if restrict else "it is outside the workspace"
    return owner_only_reason(_folded_parts(root, resolved), "write")


def guest_writable(workspace: Path, resolved: Path) -> bool:
    """Whether a guest granted the write tools could have written ``resolved`` (blocking)."""
    root = workspace.resolve()
    parts = _folded_parts(root, resolved)
    if parts is None:
        return False  # outside the workspace: no guest's file tool reaches it
    return owner_only_reason(parts, "write") is None and internal_reason(root, resolved, "write") is None


def internal_reason(root: Path, resolved: Path, access: Access, *, guest: str | None = None) -> str | None:
    """Why ``resolved`` is off limits for ``access``, or None when it is an ordinary file.

    Names are compared case-insensitively (``Sessions/`` is ``sessions/`` on a case-folding
    file system), and a file with a second hard link is refused: that link may be another
    name for a transcript or a database.
    """
    parts = _folded_parts(root, resolved)
    if parts is None:
        return None
    if ".git" in parts:
        return "the .git folder is the memory version store"
    if guest is not None and (why := _guest_reason(parts, guest, access)):
        return why
    if access == "list":
        return None
    if len(parts) > 1 and parts[0] == "sessions":
        return "session transcripts are private to their chats"
    if len(parts) > 1 and parts[0] == "state":
        return "pairing codes, the outbox and routing state belong to the gateway"
    if len(parts) == 1 and parts[0].startswith("inbox") and ".jsonl" in parts[0]:
        return "the inbox journal holds undelivered messages"
    if parts[:2] == ("memory", "archive") or parts == ("memory", "history.jsonl"):
        return "history is read with memory_search, and written only by the memory pipeline"
    if parts and parts[-1].endswith(_DATABASE_SUFFIXES):
        return "a database of the gateway (index, outbox, reminders)"
    if parts in (("config.json",), (".env",)):
        return "configuration holds secrets"
    if access == "write" and "/".join(parts) in _MEMORY_PIPELINE:
        return "this file is written only by the memory pipeline"
    if access == "write" and len(parts) > 1 and parts[0] == "usage":
        return "the usage ledger is written only by the gateway"
    if _hard_linked(resolved):
        return "it has another hard link, which may be a name for internal state"
    return None


_DATABASE_SUFFIXES = DATABASE_SUFFIXES


def _folded_parts(root: Path, resolved: Path) -> tuple[str, ...] | None:
    try:
        return tuple(p.casefold() for p in resolved.relative_to(root).parts)
    except ValueError:
        return None


def _guest_reason(parts: tuple[str, ...] | None, session_key: str, access: Access) -> str | None:
    """Why a turn that is not the owner's may not ``access`` this path: the owner-only table,
    and the media of other chats."""
    if parts is None:
        return None
    if why := owner_only_reason(parts, access):
        return why
    if len(parts) >= 3 and parts[0] == "media":
        channel, _, chat = session_key.partition(":")
        own = (channel.casefold(), chat.split(":")[0].casefold())
        if (parts[1], parts[2]) != own:
            return "files of another chat"
    return None


def _hard_linked(path: Path) -> bool:
    try:
        info = path.stat()
    except OSError:
        return False
    return path.is_file() and info.st_nlink > 1


def display(root: Path, path: Path) -> str:
    """The path as the model should write it back: relative to the workspace when inside."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return str(path)
    return rel.as_posix() or "."


def is_binary(path: Path) -> bool:
    """A NUL byte in the first 8 KiB: the same heuristic git and grep use."""
    with open(path, "rb") as fh:
        return b"\x00" in fh.read(_SNIFF_BYTES)


def read_text_strict(path: Path, shown: str) -> str:
    """The whole file as text, line endings kept, for rewriting it.

    Refuses folders, missing and binary files, and files that are not valid UTF-8: a lossy
    decode written back would silently corrupt the bytes the model never saw.
    """
    require_text_file(path, shown)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not valid UTF-8 (byte {exc.start}); editing it would corrupt it"
        ) from None


def require_text_file(path: Path, shown: str) -> None:
    require_file(path, shown)
    if is_binary(path):
        raise ToolError(f"{shown} is a binary file; only text files can be read or edited")


def require_file(path: Path, shown: str) -> None:
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; use list_dir to see what it contains")
    if not path.exists():
        raise ToolError(f"{shown} does not exist; use list_dir or grep to find the right path")
    if not path.is_file():
        raise ToolError(f"{shown} is not a regular file")


def atomic_write(path: Path, data: bytes) -> None:
    """Replace the file atomically; an existing file keeps its mode, a new one gets the
    usual ``0666 & ~umask`` (the model's files are the user's, not private state)."""
    atomic_write_bytes(path, data, mode=0o666 & ~_umask(), keep_mode=True)


@lru_cache(maxsize=1)
def _umask() -> int:
    """The process umask, read without changing it (os.umask would, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022
