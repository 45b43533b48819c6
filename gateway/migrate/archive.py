"""``lucid export`` and ``lucid import lucid``: one portable archive of an assistant.

The archive is a ``.tar.gz``::

    manifest.json            {"format": "lucidgate-export", "version": 1, "created_at", ...}
    workspace/...            bootstrap and memory files, memory/history.jsonl, its cursors,
                             memory/archive/, daily notes, sessions/, skills/
    memory.bundle            the memory git history (``git bundle --all``)
    config.json              the config with every secret emptied (tokens, keys, MCP env,
                             extra headers): the new machine gets its own

Importing restores into a fresh workspace exactly (history and cursors byte for byte, the
git history fetched from the bundle after ``git bundle verify``); into a workspace that
already has a life of its own it goes through the same merge as the other importers
(``read_lucid`` -> ``Source``).

What the owner asked to forget (``state/forgotten.json``) is redacted in the transcripts an
export carries: they are records at home, but an archive is for reading elsewhere.

An archive is someone else's data, and importing it runs nothing: only the files named
above are taken (never a ``.git/`` or ``state/`` it may carry — a repository's config and
hooks run commands, and state holds pairings and owner sessions), each read through
``SourceFiles`` (no links, no special files), written ``0600``. A bundle that does not
verify is left out and the memory history starts fresh, with a warning.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from lucidgate.config.schema import Config
from lucidgate.config.fileio import atomic_write_bytes
from lucidgate.gateway.migrate.model import HistoryItem, SessionItem, Source
from lucidgate.gateway.migrate.safe_files import PRIVATE_DIR, SourceFiles
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.tombstones import Matcher, Tombstones, redact_message

FORMAT = "lucidgate-export"
VERSION = 1
WORKSPACE_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "HEARTBEAT.md")
MEMORY_FILES = ("memory/MEMORY.md", "memory/history.jsonl", "memory/.cursor", "memory/.dream_cursor")
FOLDERS = ("memory/archive", "sessions", "skills")
_SECRET_KEYS = {"apikey", "token", "ownertoken", "admintoken", "bottoken", "apptoken", "signingsecret", "secrettoken", "callbacksecret"}


def export_archive(config: Config, out: Path, *, git: GitStore, tombstones: Tombstones) -> list[str]:
    """Write the archive to ``out`` (atomically); returns the workspace paths it holds. ``git``
    and ``tombstones`` are the workspace's own stores (``WorkspaceParts``)."""
    return _write(config, out, {"": (config.workspace, git, tombstones)})["files"]


def export_agents(config: Config, out: Path, agents: dict[str, tuple[Path, GitStore, Tombstones]]) -> dict[str, Any]:
    """The archive of several agents (``agents.list``): each agent's workspace, history and
    bundle under ``agents/<id>/``, laid out as one workspace's export; ``agents`` maps each id
    to its workspace and stores. Returns the manifest."""
    return _write(config, out, agents)


def _write(config: Config, out: Path, workspaces: dict[str, tuple[Path, GitStore, Tombstones]]) -> dict[str, Any]:
    tmp = out.with_name(f".{out.name}.tmp")
    manifest: dict[str, Any] = {"format": FORMAT, "version": VERSION,
                                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(tmp, "w:gz") as tar:
        for agent_id, (workspace, git, tombstones) in workspaces.items():
            prefix = f"agents/{agent_id}/" if agent_id else ""
            members = _add_workspace(tar, workspace, git, tombstones, Path(scratch) / (agent_id or "one"), prefix)
            if agent_id:
                manifest.setdefault("agents", {})[agent_id] = {"workspace": str(workspace), "files": members}
            else:
                manifest.update(workspace=str(workspace), files=members)
        _add_bytes(tar, "config.json", json.dumps(scrub(config), indent=2).encode())
        _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=2).encode())
    tmp.replace(out)
    return manifest


def _add_workspace(tar: tarfile.TarFile, workspace: Path, git: GitStore, tombstones: Tombstones, scratch: Path,
                   prefix: str) -> list[str]:
    """One workspace's files and memory bundle under ``prefix``; returns the paths it took."""
    members: list[str] = []
    for rel in (*WORKSPACE_FILES, *MEMORY_FILES):
        if (workspace / rel).is_file():
            tar.add(workspace / rel, arcname=f"{prefix}workspace/{rel}")
            members.append(rel)
    memory = workspace / "memory"
    for note in sorted(memory.glob("[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].md")) if memory.is_dir() else []:
        tar.add(note, arcname=f"{prefix}workspace/memory/{note.name}")
        members.append(f"memory/{note.name}")
    forgotten = tombstones.matcher()
    for folder in FOLDERS:
        if (workspace / folder).is_dir():
            redacted = folder == "sessions" and bool(forgotten)
            tar.add(workspace / folder, arcname=f"{prefix}workspace/{folder}", filter=_no_links,
                    recursive=not redacted)
            if redacted:
                _add_redacted_sessions(tar, workspace / folder, forgotten, prefix)
            members.append(f"{folder}/")
    scratch.mkdir(parents=True, exist_ok=True)
    bundle = scratch / "memory.bundle"
    if git.bundle(bundle):
        tar.add(bundle, arcname=f"{prefix}memory.bundle")
    return members


def scrub(config: Config) -> dict[str, Any]:
    """The config as JSON with every secret emptied."""
    document = config.model_dump(mode="json", by_alias=True)

    def walk(node: Any, parent: str = "") -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                lowered = key.lower()
                if parent in ("env", "headers", "extraheaders") and isinstance(value, str):
                    out[key] = ""
                elif lowered in _SECRET_KEYS and isinstance(value, str):
                    out[key] = ""
                else:
                    out[key] = walk(value, lowered)
            return out
        if isinstance(node, list):
            return [walk(v, parent) for v in node]
        return node

    return dict(walk(document))


def _add_redacted_sessions(tar: tarfile.TarFile, folder: Path, forgotten: Matcher, prefix: str = "") -> None:
    for path in sorted(folder.iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        lines = []
        for raw in path.read_bytes().splitlines(keepends=True):
            try:
                message = json.loads(raw)
            except ValueError:
                lines.append(raw)
                continue
            if isinstance(message, dict) and "role" in message:
                shown = redact_message(message, forgotten)
                if shown is not message:
                    raw = (json.dumps(shown, ensure_ascii=False) + "\n").encode("utf-8")
            lines.append(raw)
        _add_bytes(tar, f"{prefix}workspace/sessions/{path.name}", b"".join(lines))


def _no_links(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if info.issym() or info.islnk() else info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o600
    tar.addfile(info, io.BytesIO(data))


class ExtractedArchive:
    """The archive unpacked into a temporary folder (safe extraction: data filter)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._dir = Path(tempfile.mkdtemp(prefix="lucid-import-"))

    def __enter__(self) -> Path:
        try:
            with tarfile.open(self.path, "r:*") as tar:
                tar.extractall(self._dir, filter="data")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise ValueError(f"{self.path} is not a readable lucid export ({exc})") from None
        manifest = self._dir / "manifest.json"
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if data.get("format") != FORMAT:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise ValueError(f"{self.path} is not a lucid export (no lucidgate manifest)")
        return self._dir

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def is_fresh(git: GitStore) -> bool:
    """No history, no sessions and at most the initial memory commit: nothing to merge with."""
    workspace = git.workspace
    history = workspace / "memory" / "history.jsonl"
    if history.exists() and history.stat().st_size > 0:
        return False
    sessions = workspace / "sessions"
    if sessions.is_dir() and any(sessions.glob("*.jsonl")):
        return False
    return len(git.log(2)) <= 1


def restore_fresh(unpacked: Path, git: GitStore, warnings: list[str] | None = None) -> list[str]:
    """Copy the archive's files over an empty workspace and adopt its verified git history.

    Only the export's own paths are taken (``WORKSPACE_FILES``, ``MEMORY_FILES``, daily notes,
    ``FOLDERS``): a ``.git/`` or ``state/`` in the archive is never copied."""
    warnings = warnings if warnings is not None else []
    workspace = git.workspace
    source = unpacked / "workspace"
    files = SourceFiles(source, warnings=warnings)
    restored: list[str] = []
    for rel in _export_paths(source, files):
        data = files.read_bytes(source / rel)
        if data is None:
            continue
        target = workspace / rel
        _private_parents(target.parent, workspace)
        atomic_write_bytes(target, data)  # 0600
        restored.append(rel)
    for extra in (".git", "state"):
        if os.path.lexists(source / extra):
            warnings.append(f"left out {extra}/ from the archive: an import never takes a repository or state")
    bundle = unpacked / "memory.bundle"
    if bundle.exists():
        reason = git.adopt_bundle(bundle)
        if reason is not None:
            warnings.append(f"memory history not restored, it starts fresh: {reason}")
    git.init()  # our .gitignore and identity
    return restored


def _export_paths(source: Path, files: SourceFiles) -> list[str]:
    """The workspace-relative files an export holds, walked without following links."""
    found = [rel for rel in (*WORKSPACE_FILES, *MEMORY_FILES) if os.path.lexists(source / rel)]
    memory = source / "memory"
    if files.is_dir(memory):
        found += [f"memory/{p.name}" for p in sorted(memory.glob("[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].md"))]
    for folder in FOLDERS:
        root = source / folder
        if not os.path.lexists(root) or not files.is_dir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in sorted(dirnames) if files.is_dir(Path(dirpath) / d)]
            found += [(Path(dirpath) / n).relative_to(source).as_posix() for n in sorted(filenames)]
    return found


def _private_parents(folder: Path, workspace: Path) -> None:
    """Create ``folder`` (inside ``workspace``) and any missing parent, ``0700``."""
    missing = []
    while not folder.exists() and folder != workspace:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(mode=PRIVATE_DIR)
        os.chmod(path, PRIVATE_DIR)


def read_lucid(unpacked: Path) -> Source:
    """An archive as a ``Source``, for merging into a workspace that is already in use."""
    root = unpacked / "workspace"
    source = Source("lucid", unpacked)
    files = SourceFiles(root, warnings=source.warnings)
    for rel in ("SOUL.md", "USER.md", "memory/MEMORY.md"):
        content = files.read_text(root / rel)
        if content is not None:
            source.memory_files[rel] = content
    for note in sorted((root / "memory").glob("[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].md")):
        content = files.read_text(note)
        if content is not None:
            source.daily_notes[f"memory/{note.name}"] = content
    history = files.read_text(root / "memory" / "history.jsonl")
    if history is not None:
        for line in history.splitlines():
            try:
                entry = json.loads(line)
                source.history.append(HistoryItem(str(entry.get("timestamp") or ""), str(entry["content"])))
            except (ValueError, KeyError, TypeError):
                continue
    for path in sorted((root / "sessions").glob("*.jsonl")):
        content = files.read_text(path)
        if content is None:
            continue
        lines = [json.loads(x) for x in content.splitlines() if x.strip()]
        if not lines or lines[0].get("_type") != "metadata":
            continue
        head, messages = lines[0], [m for m in lines[1:] if "role" in m]
        source.sessions.append(SessionItem(key=str(head["key"]), messages=messages, created_at=head.get("created_at"),
                                           updated_at=head.get("updated_at"), origin_key=str(head["key"]),
                                           last_consolidated=int(head.get("last_consolidated", 0))))
    source.skills = files.skill_folders(root / "skills") if os.path.lexists(root / "skills") else []
    return source
