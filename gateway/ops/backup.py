"""``lucid backup`` / ``lucid restore``: one archive of config and workspace, taken live.

What goes in (a ``.tar.gz``):

- ``config.json`` — with every secret blanked unless ``include_secrets`` (an archive
  tends to travel: to another disk, a cloud drive, a chat with support);
- ``workspace/`` — what the assistant *is*, chosen by an allow-list (``TAKEN``): the prompt
  files, memory (notes, history, its archive), transcripts, skills, the usage ledger and the
  chats' media. Everything else in the workspace is left out and listed in the manifest:
  ``state/`` above all, where channels keep their live sessions (a Matrix access token, the
  local API token, console login links, webhook credential records) — a new kind of
  credential file must never ride along just because nobody thought to exclude it. A restore
  therefore logs every channel in again;
- ``forgotten.json`` — what the owner asked to forget (``state/forgotten.json``, hashed unless
  the owner kept the text): a restored workspace keeps it forgotten, also in the history;
- ``memory.bundle`` — the memory git history as a ``git bundle`` (never the ``.git`` folder:
  a repository's config and hooks run commands wherever it is unpacked);
- ``manifest.json`` — version, time, what was left out.

Consistency while the gateway runs: a ``*.sqlite`` store among the taken files would be
copied with SQLite's online backup API, the memory history is bundled under
``memory/.git.lock`` (the lock every git change takes), and JSONL files are append-only, so
at worst the last line is cut and the loaders already drop a torn tail. Inside the taken
folders, rebuildable indexes, locks, SQLite sidecars, temp files and links are skipped.

Restore goes into an empty (or new) directory, never over live data: ``config.json``
there points at ``workspace/`` there. It runs nothing from the archive: ``workspace/.git/``
and ``workspace/state/`` (pairings, owner sessions, scheduled jobs — trust decisions and
work that would run) are never unpacked, whoever made the archive; the memory history is
rebuilt from ``memory.bundle`` after ``git bundle verify``, or starts fresh. The one file of
``state/`` a restore writes is the tombstone file, rebuilt from ``forgotten.json`` entry by entry
(a malformed one is refused with a warning): it holds no credential and runs nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from lucidgate.config.errors import LucidError
from lucidgate.config.fileio import atomic_write_text
from lucidgate.config.schema import Config
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.tombstones import TOMBSTONES_FILE, Tombstones

FORMAT = 1
# The only workspace entries a backup takes (top-level names): the prompt files, memory,
# transcripts, skills, the usage ledger and the chats' media. None of them is where a channel
# or the gateway keeps a credential.
TAKEN_FILES = frozenset({"AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "HEARTBEAT.md"})
TAKEN_FOLDERS = frozenset({"memory", "sessions", "skills", "usage", "media"})
# Inside the taken folders, still skipped: rebuildable indexes, locks, SQLite sidecars and
# half-written temp files.
_SKIP = re.compile(r"(^|/)(index|indexes)(/|$)|(^|/)[^/]*index[^/]*\.(sqlite|db)$|"
                   r"\.(sqlite|db)-(wal|shm|journal)$|\.tmp$|(^|/)\.readyz\.|\.lock$")
_SQLITE = re.compile(r"\.(sqlite|db)$")


class BackupError(LucidError):
    """The backup or restore could not be done; the message says why."""


def secret_keys(model: type[BaseModel] = Config) -> set[str]:
    """The JSON names (camelCase and snake_case) of every secret field in the schema."""
    found: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            if candidate is SecretStr:
                found |= {name, field.alias or name}
            elif isinstance(candidate, type) and issubclass(candidate, BaseModel):
                found |= secret_keys(candidate)
    return found | {"apiKey", "api_key", "extraHeaders", "extra_headers"}


def _blank_secrets(node: Any, keys: set[str]) -> Any:
    if isinstance(node, dict):
        return {k: ("" if k in keys and isinstance(v, str) else {} if k in keys and isinstance(v, dict)
                    else _blank_secrets(v, keys)) for k, v in node.items()}
    if isinstance(node, list):
        return [_blank_secrets(v, keys) for v in node]
    return node


def taken(rel: str) -> bool:
    """Whether the workspace file at ``rel`` (POSIX, relative) belongs in a backup."""
    top, _, rest = rel.partition("/")
    if not rest:
        return top in TAKEN_FILES
    return top in TAKEN_FOLDERS and not _SKIP.search(rel)


def _sqlite_snapshot(path: Path) -> bytes:
    """A consistent copy via the online backup API (works while another process writes)."""
    with tempfile.TemporaryDirectory(prefix="lucid-backup-") as tmp:
        copy = Path(tmp) / "copy.sqlite"
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as src, \
                contextlib.closing(sqlite3.connect(copy)) as dst:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        return copy.read_bytes()


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath) / name


def _candidates(workspace: Path, not_taken: list[str]) -> Iterator[Path]:
    """The files of the taken entries (walked without following links); every other top-level
    entry is named in ``not_taken`` (the memory repository goes in as a bundle instead)."""
    for entry in sorted(workspace.iterdir()):
        if entry.name in TAKEN_FOLDERS and entry.is_dir() and not entry.is_symlink():
            yield from _walk(entry)
        elif entry.name in TAKEN_FILES:
            yield entry
        elif entry.name != ".git":
            not_taken.append(entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else ""))


def _plain(path: Path) -> bool:
    """A regular file with one name: a link (symbolic or hard) may be another name for a file
    a backup leaves out."""
    info = path.lstat()
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(mtime if mtime is not None else time.time())
    tar.addfile(info, io.BytesIO(data))


def create_backup(config: Config, config_path: Path, out: Path, *, include_secrets: bool = False) -> dict[str, Any]:
    """Write the archive to ``out`` (atomically); returns the manifest."""
    workspace = config.workspace
    if not workspace.is_dir():
        raise BackupError(f"the workspace {workspace} does not exist; nothing to back up")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    skipped: list[str] = []
    not_taken: list[str] = []
    files = 0
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            if config_path.exists():
                document = json.loads(config_path.read_text(encoding="utf-8") or "{}")
                if not include_secrets:
                    document = _blank_secrets(document, secret_keys())
                _add_bytes(tar, "config.json", (json.dumps(document, indent=2) + "\n").encode())
            for path in _candidates(workspace, not_taken):
                rel = path.relative_to(workspace).as_posix()
                if not taken(rel) or not _plain(path):
                    skipped.append(rel)
                    continue
                data = _sqlite_snapshot(path) if _SQLITE.search(rel) else path.read_bytes()
                _add_bytes(tar, f"workspace/{rel}", data, path.stat().st_mtime)
                files += 1
            forgotten = workspace / TOMBSTONES_FILE
            if forgotten.is_file() and _plain(forgotten):
                _add_bytes(tar, "forgotten.json", forgotten.read_bytes(), forgotten.stat().st_mtime)
            with tempfile.TemporaryDirectory(prefix="lucid-backup-") as scratch:
                bundle = Path(scratch) / "memory.bundle"
                # The workspace's own history store (WorkspaceParts), under the git lock: a consistent history.
                if WorkspaceParts(config).git.bundle(bundle):
                    _add_bytes(tar, "memory.bundle", bundle.read_bytes())
            manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "secrets": include_secrets, "files": files, "skipped": skipped, "not_taken": not_taken,
                        "workspace": str(workspace), "config": str(config_path)}
            _add_bytes(tar, "manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp_name, 0o600)
        os.replace(tmp_name, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    return manifest


def restore_backup(archive: Path, target: Path) -> dict[str, Any]:
    """Unpack into ``target`` (missing or empty); the config there uses ``target/workspace``."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BackupError(f"{target} is not empty; restore into a new or empty directory")
    try:
        tar = tarfile.open(archive, mode="r:gz")
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(f"{archive} is not a lucid backup ({exc})") from None
    with tar:
        names = tar.getnames()
        if "manifest.json" not in names:
            raise BackupError(f"{archive} is not a lucid backup (no manifest.json)")
        members = tar.getmembers()
        for member in members:
            if not (member.name in ("config.json", "manifest.json", "memory.bundle", "forgotten.json")
                    or member.name.startswith("workspace/") or member.name == "workspace"):
                raise BackupError(f"{archive}: unexpected entry {member.name!r}; not restoring")
        left_out = sorted({skip for m in members if (skip := _never_restored(m.name)) is not None})
        members = [m for m in members if _never_restored(m.name) is None]
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = Path(tempfile.mkdtemp(dir=target, prefix=".restore."))
        try:
            # The "data" filter refuses absolute paths, "..", links out of the tree, devices.
            tar.extractall(staging, members=members, filter="data")
            manifest = json.loads((staging / "manifest.json").read_text(encoding="utf-8"))
            if (staging / "workspace").exists():
                os.replace(staging / "workspace", target / "workspace")
            else:
                (target / "workspace").mkdir(mode=0o700)
            if (staging / "memory.bundle").exists():
                # Not WorkspaceParts: the restored tree has no loaded config yet, only files.
                reason = GitStore(target / "workspace").adopt_bundle(staging / "memory.bundle")
                if reason is not None:
                    manifest.setdefault("warnings", []).append(f"memory history starts fresh: {reason}")
            _adopt_tombstones(staging / "forgotten.json", target / "workspace", manifest)
            config_file = staging / "config.json"
            document = json.loads(config_file.read_text(encoding="utf-8")) if config_file.exists() else {}
        finally:
            for path in sorted(staging.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
            staging.rmdir()
    document.setdefault("agents", {}).setdefault("defaults", {})["workspace"] = str(target / "workspace")
    atomic_write_text(target / "config.json", json.dumps(document, indent=2) + "\n")
    os.chmod(target / "config.json", 0o600)
    for dirpath, dirnames, filenames in os.walk(target):
        os.chmod(dirpath, 0o700)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o600)
    manifest["left_out"] = left_out
    return manifest


def _adopt_tombstones(archived: Path, workspace: Path, manifest: dict[str, Any]) -> None:
    """Write the archive's tombstones into the restored workspace (before anything reads it)."""
    if not archived.is_file():
        return
    try:
        Tombstones(workspace).adopt(archived.read_bytes())
    except ValueError as exc:
        manifest.setdefault("warnings", []).append(f"forgotten.json left out: {exc}")


def _never_restored(name: str) -> str | None:
    """``workspace/.git/`` or ``workspace/state/`` for a member under either, else None."""
    parts = Path(name).parts
    if len(parts) >= 2 and parts[0] == "workspace" and parts[1] in (".git", "state"):
        return f"workspace/{parts[1]}/"
    return None
