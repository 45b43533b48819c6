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

With ``agents.list`` each agent taken has its ``workspace/``, ``forgotten.json`` and
``memory.bundle`` under ``agents/<id>/`` instead (format 2; gateway/ops/backup_agents.py).

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
import shutil
import sqlite3
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from lucidgate.config.agents_schema import AGENT_ID
from lucidgate.config.errors import LucidError
from lucidgate.config.fileio import atomic_write_text
from lucidgate.config.schema import Config
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.tombstones import TOMBSTONES_FILE, Tombstones

FORMAT = 1
AGENTS_FORMAT = 2  # a folder per agent: agents/<id>/{workspace/, memory.bundle, forgotten.json}
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


def create_backup(config: Config, config_path: Path, out: Path, *, include_secrets: bool = False,
                  agents: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the archive to ``out`` (atomically); returns the manifest. ``agents``: the ids of
    the agents to take (``agents.list``), each under ``agents/<id>/`` (see
    ``gateway.ops.backup_agents``); None: the one workspace of ``config``, at the top."""
    chosen = {agent_id: config.for_agent(agent_id) for agent_id in agents} if agents is not None else None
    for workspace in (c.workspace for c in (chosen or {"": config}).values()):
        if not workspace.is_dir():
            raise BackupError(f"the workspace {workspace} does not exist; nothing to back up")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            if config_path.exists():
                document = json.loads(config_path.read_text(encoding="utf-8") or "{}")
                if not include_secrets:
                    document = _blank_secrets(document, secret_keys())
                _add_bytes(tar, "config.json", (json.dumps(document, indent=2) + "\n").encode())
            manifest: dict[str, Any] = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "secrets": include_secrets}
            if chosen is None:
                manifest.update(add_workspace(tar, config, ""))
            else:
                taken_agents = {agent_id: add_workspace(tar, c, f"agents/{agent_id}/")
                                for agent_id, c in chosen.items()}
                manifest.update(format=AGENTS_FORMAT, agents=taken_agents, default=config.default_agent_id,
                                files=sum(a["files"] for a in taken_agents.values()),
                                not_taken=sorted({n for a in taken_agents.values() for n in a["not_taken"]}))
            manifest["config"] = str(config_path)
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


def add_workspace(tar: tarfile.TarFile, config: Config, prefix: str) -> dict[str, Any]:
    """``config``'s workspace into ``tar`` under ``prefix``: its taken files (``workspace/``),
    its tombstones (``forgotten.json``) and its memory history (``memory.bundle``). Returns
    what the manifest says of it."""
    workspace = config.workspace
    skipped: list[str] = []
    not_taken: list[str] = []
    files = 0
    for path in _candidates(workspace, not_taken):
        rel = path.relative_to(workspace).as_posix()
        if not taken(rel) or not _plain(path):
            skipped.append(rel)
            continue
        data = _sqlite_snapshot(path) if _SQLITE.search(rel) else path.read_bytes()
        _add_bytes(tar, f"{prefix}workspace/{rel}", data, path.stat().st_mtime)
        files += 1
    forgotten = workspace / TOMBSTONES_FILE
    if forgotten.is_file() and _plain(forgotten):
        _add_bytes(tar, f"{prefix}forgotten.json", forgotten.read_bytes(), forgotten.stat().st_mtime)
    with tempfile.TemporaryDirectory(prefix="lucid-backup-") as scratch:
        bundle = Path(scratch) / "memory.bundle"
        # The workspace's own history store (WorkspaceParts), under the git lock: a consistent history.
        if WorkspaceParts(config).git.bundle(bundle):
            _add_bytes(tar, f"{prefix}memory.bundle", bundle.read_bytes())
    return {"files": files, "skipped": skipped, "not_taken": not_taken, "workspace": str(workspace)}


def restore_backup(archive: Path, target: Path) -> dict[str, Any]:
    """Unpack into ``target`` (missing or empty), a copy beside the live setup: the config
    there uses ``target/workspace``, or for an archive of agents ``target/agents/<id>`` for
    each agent of its ``agents.list`` (``relocate``), never a live workspace."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BackupError(f"{target} is not empty; restore into a new or empty directory")
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    with Unpacked(archive, target) as unpacked:
        manifest = unpacked.manifest
        agents = archived_agents(manifest)
        places = {"": target / "workspace"} if agents is None else {a: target / "agents" / a for a in agents}
        for agent_id, place in places.items():
            unpacked.place(agent_id, place)
        config_file = unpacked.root / "config.json"
        document = json.loads(config_file.read_text(encoding="utf-8")) if config_file.exists() else {}
    if agents is None:
        document.setdefault("agents", {}).setdefault("defaults", {})["workspace"] = str(target / "workspace")
    else:
        relocate(document, target / "agents")
    atomic_write_text(target / "config.json", json.dumps(document, indent=2) + "\n")
    private(target)
    return manifest


def relocate(document: dict[str, Any], root: Path) -> None:
    """Point every agent of the config ``document`` at ``root/<id>`` (and
    ``agents.defaults.workspace`` at the default agent's), in place."""
    agents = document.setdefault("agents", {})
    entries = [e for e in agents.get("list") or [] if isinstance(e, dict) and isinstance(e.get("id"), str)]
    for entry in entries:
        entry["workspace"] = str(root / entry["id"])
    default = next((e["id"] for e in entries if e.get("default") is True), entries[0]["id"] if entries else "default")
    agents.setdefault("defaults", {})["workspace"] = str(root / default)


def archived_agents(manifest: dict[str, Any]) -> list[str] | None:
    """The agents an archive holds (``agents/<id>/``), or None for one workspace at the top."""
    agents = manifest.get("agents")
    if agents is None:
        return None
    if not isinstance(agents, dict) or not all(isinstance(a, str) and re.match(AGENT_ID, a) for a in agents):
        raise BackupError("the archive's manifest lists malformed agents; not restoring")
    return list(agents)


class Unpacked:
    """An archive checked entry by entry and extracted (data filter) into a staging folder
    under ``near``, removed again on exit. ``place`` moves one workspace out of it."""

    def __init__(self, archive: Path, near: Path) -> None:
        self.archive, self.near = archive, near
        self.root = Path()
        self.manifest: dict[str, Any] = {}

    def __enter__(self) -> Unpacked:
        try:
            tar = tarfile.open(self.archive, mode="r:gz")
        except (OSError, tarfile.TarError) as exc:
            raise BackupError(f"{self.archive} is not a lucid backup ({exc})") from None
        with tar:
            manifest = _read_manifest(tar)
            agents = archived_agents(manifest or {})
            members = tar.getmembers()
            for member in members:
                if not _expected(member.name, agents):
                    raise BackupError(f"{self.archive}: unexpected entry {member.name!r}; not restoring")
            if manifest is None:
                raise BackupError(f"{self.archive} is not a lucid backup (no readable manifest.json)")
            self.manifest = manifest
            self.manifest["left_out"] = sorted({skip for m in members if (skip := _never_restored(m.name))})
            self.near.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.root = Path(tempfile.mkdtemp(dir=self.near, prefix=".restore."))
            try:
                # The "data" filter refuses absolute paths, "..", links out of the tree, devices.
                tar.extractall(self.root, members=[m for m in members if not _never_restored(m.name)],
                               filter="data")
            except BaseException:
                shutil.rmtree(self.root, ignore_errors=True)
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def place(self, agent_id: str, dest: Path) -> None:
        """Move the workspace of ``agent_id`` ("": the archive's one) to ``dest`` (missing or
        empty), then rebuild its memory history from the bundle and adopt its tombstones."""
        source = self.root / "agents" / agent_id if agent_id else self.root
        if dest.exists():
            dest.rmdir()  # empty: checked by the caller; never merged into
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if (source / "workspace").exists():
            shutil.move(source / "workspace", dest)
        else:
            dest.mkdir(mode=0o700)
        if (source / "memory.bundle").exists():
            # Not WorkspaceParts: the restored tree has no loaded config yet, only files.
            reason = GitStore(dest).adopt_bundle(source / "memory.bundle")
            if reason is not None:
                whose = f"{agent_id}'s memory" if agent_id else "memory"
                self.manifest.setdefault("warnings", []).append(f"{whose} history starts fresh: {reason}")
        _adopt_tombstones(source / "forgotten.json", dest, self.manifest)


def _read_manifest(tar: tarfile.TarFile) -> dict[str, Any] | None:
    try:
        member = tar.extractfile("manifest.json")
        manifest = json.loads(member.read() if member is not None else b"")
    except (KeyError, ValueError, tarfile.TarError):
        return None
    return manifest if isinstance(manifest, dict) else None


def private(root: Path) -> None:
    """Folders 0700 and files 0600 under ``root``: a restore holds private conversations."""
    for dirpath, _, filenames in os.walk(root):
        os.chmod(dirpath, 0o700)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o600)


def _expected(name: str, agents: list[str] | None) -> bool:
    """Whether an archive entry is one a backup writes (anything else: refuse the archive)."""
    if name in ("config.json", "manifest.json"):
        return True
    parts = Path(name).parts
    if agents is not None:  # agents/<id>/ then what one workspace has at the top
        if not parts or parts[0] != "agents" or (len(parts) > 1 and parts[1] not in agents):
            return False
        parts = parts[2:]
        if not parts:
            return True
    return parts[0] == "workspace" or (len(parts) == 1 and parts[0] in ("memory.bundle", "forgotten.json"))


def _adopt_tombstones(archived: Path, workspace: Path, manifest: dict[str, Any]) -> None:
    """Write the archive's tombstones into the restored workspace (before anything reads it)."""
    if not archived.is_file():
        return
    try:
        Tombstones(workspace).adopt(archived.read_bytes())
    except ValueError as exc:
        manifest.setdefault("warnings", []).append(f"forgotten.json left out: {exc}")


def _never_restored(name: str) -> str | None:
    """``workspace/.git/`` or ``workspace/state/`` (under ``agents/<id>/`` too) for a member
    under either, else None."""
    parts = Path(name).parts
    prefix = ""
    if len(parts) >= 2 and parts[0] == "agents":
        prefix, parts = f"agents/{parts[1]}/", parts[2:]
    if len(parts) >= 2 and parts[0] == "workspace" and parts[1] in (".git", "state"):
        return f"{prefix}workspace/{parts[1]}/"
    return None
