"""Apply a ``Source`` to our workspace: merge, never overwrite; twice changes nothing.

- SOUL.md / USER.md / MEMORY.md and daily notes: taken as they are when ours is missing or
  still the untouched template; otherwise only their lines we do not already have are added,
  under ``## Imported from <kind>``. A second run finds every line present and adds nothing.
- History: appended with new cursors (their timestamps kept), each entry fingerprinted in
  ``state/imports.json`` so it is never imported twice. When Dream had processed all of our
  history before, the imported entries are marked processed too: their lessons are already
  in the memory files merged above.
- Sessions: written in our format under their mapped key, unless we already have that
  session (never merged into a live conversation). A transcript ending in an unanswered
  message gets a closing note, so the gateway does not answer a months-old message.
- Skills: folders copied when we have no skill of that name — plain files only, ``0600`` in
  ``0700`` folders (``safe_files.copy_private``: links and special files are left out).
- Channel settings: offered; written into the config only with ``apply_channels``, and then
  only where ours are empty (allowFrom lists are united).
- Memory files, notes and skills changed by the import become one commit ``import: …``.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write_text
from lucidgate.gateway.migrate.model import HistoryItem, Source
from lucidgate.gateway.migrate.safe_files import copy_private
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.sessions import FORMAT_VERSION
from lucidgate.memory.store import MemoryStore
from lucidgate.memory.tombstones import Matcher, redact_message

IMPORTS_STATE = Path("state") / "imports.json"
CLOSING_NOTE = "(imported conversation: no reply was recorded for this message)"
_TEMPLATES = {"SOUL.md": "SOUL.md", "USER.md": "USER.md", "memory/MEMORY.md": "MEMORY.md"}


@dataclass(slots=True)
class ImportReport:
    actions: list[str] = field(default_factory=list)
    offers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    commit: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def merge_markdown(ours: str, theirs: str, label: str, template: str | None = None) -> str:
    """Ours plus the lines of theirs we lack (see the module docstring)."""
    if not theirs.strip():
        return ours
    if not ours.strip() or (template is not None and ours.strip() == template.strip()):
        return theirs if theirs.endswith("\n") else theirs + "\n"
    known = {_norm(line) for line in ours.splitlines()}
    new = [line for line in theirs.splitlines()
           if _norm(line) and _norm(line) not in known and not line.startswith("# ")]
    if not new:
        return ours
    return ours.rstrip("\n") + f"\n\n## Imported from {label}\n\n" + "\n".join(new) + "\n"


def _norm(line: str) -> str:
    return " ".join(line.strip().lstrip("-*").split()).lower()


def _template(name: str) -> str | None:
    try:
        return resources.files("lucidgate.config").joinpath("templates", _TEMPLATES[name]).read_text(encoding="utf-8")
    except (OSError, KeyError):
        return None


async def import_source(source: Source, memory: MemoryStore, git: GitStore, *, dry_run: bool,
                        config_path: Path | None = None, apply_channels: bool = False) -> ImportReport:
    """Apply ``source`` to the workspace of ``memory`` and ``git`` — the configured stores
    (``WorkspaceParts``), so imported history is stamped in the owner's timezone. The file and
    git work is blocking, so it runs in one worker thread before the history is appended (the
    memory store's own async path) and in one more after it, for the state file and the commit."""
    report = ImportReport(warnings=list(source.warnings))
    touched, history = await asyncio.to_thread(_apply_files, source, memory, report, git, dry_run=dry_run,
                                               config_path=config_path, apply_channels=apply_channels)
    if history is not None:
        await history.append(source.kind)
    if dry_run or (history is None and not touched):
        return report
    label = f"{source.kind} ({source.root})"
    report.commit = await asyncio.to_thread(_finish, git, history, touched,
                                            f"import: {label}, {len(report.actions)} change(s)")
    return report


def _apply_files(source: Source, memory: MemoryStore, report: ImportReport, git: GitStore, *, dry_run: bool,
                 config_path: Path | None, apply_channels: bool) -> tuple[list[str], _History | None]:
    """Everything but the history appends (blocking): the paths changed, and the history to append."""
    touched: list[str] = []
    workspace = memory.workspace
    forgotten = memory.tombstones.matcher()  # what the owner asked to forget stays out
    if not dry_run:  # hand edits and the initial state are committed before we change anything
        git.init()
        git.commit_manual_edits()
    for rel, theirs in {**source.memory_files, **source.daily_notes}.items():
        path = workspace / rel
        ours = path.read_text(encoding="utf-8") if path.exists() else ""
        template = _template(rel)
        merged = merge_markdown(ours, forgotten.drop_lines(theirs)[0], source.kind, template)
        if merged != ours:
            fresh = not ours.strip() or (template is not None and ours.strip() == template.strip())
            report.actions.append(f"{'take' if fresh else 'merge into'} {rel}")
            touched.append(rel)
            if not dry_run:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, merged)
    for skill in source.skills:
        target = workspace / "skills" / skill.name
        if target.exists():
            if (target / "SKILL.md").read_bytes() != (skill / "SKILL.md").read_bytes():
                report.warnings.append(f"skills/{skill.name} exists and differs; kept ours")
            continue
        report.actions.append(f"copy skill {skill.name}")
        touched.append(f"skills/{skill.name}")
        if not dry_run:
            copy_private(skill, target, report.warnings)
    history = _plan_history(source, memory, report, dry_run)
    _import_sessions(source, workspace, report, dry_run, forgotten)
    _offer_channels(source, config_path, report, dry_run=dry_run or not apply_channels)
    return touched, history


def _finish(git: GitStore, history: _History | None, touched: list[str], message: str) -> str | None:
    """Record the imported history's fingerprints, then commit what changed (blocking)."""
    if history is not None:
        history.save_state()
    return git.commit(message, touched) if touched else None


@dataclass(slots=True)
class _History:
    """History entries to append, and what ``state/imports.json`` will say once they are in."""

    store: MemoryStore
    entries: list[tuple[HistoryItem, str]]  # (entry, its fingerprint)
    state: dict[str, Any]
    state_path: Path
    caught_up: bool  # Dream had processed all of our history: the imported entries count as processed

    async def append(self, kind: str) -> None:
        seen = set(self.state.get("history", []))
        last = 0
        for item, fp in self.entries:
            # The owner imports their own assistant's memory: owner-private provenance.
            last = await self.store.append_history(item.content, session_key=f"import:{kind}",
                                                   timestamp=item.timestamp or None, channel="import",
                                                   chat_type="private", owner=True)
            seen.add(fp)
        self.state["history"] = sorted(seen)
        if self.caught_up:
            await self.store.set_dream_cursor(last)

    def save_state(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.state_path, json.dumps(self.state, indent=1))


def _plan_history(source: Source, store: MemoryStore, report: ImportReport, dry_run: bool) -> _History | None:
    """The history entries we do not hold yet (blocking reads); None when there is nothing to append."""
    workspace = store.workspace
    state_path = workspace / IMPORTS_STATE
    state = _load_state(state_path)
    seen = set(state.get("history", []))
    fresh = [(item, item.fingerprint(source.kind)) for item in source.history]
    present = _existing_history(workspace / "memory" / "history.jsonl")
    fresh = [(item, fp) for item, fp in fresh
             if fp not in seen and (item.timestamp, item.content) not in present]
    if not fresh:
        return None
    report.actions.append(f"append {len(fresh)} history entr{'y' if len(fresh) == 1 else 'ies'} "
                          f"(cursors re-numbered)")
    if dry_run:
        return None
    return _History(store, fresh, state, state_path, caught_up=store.dream_cursor() >= store.last_cursor())


def _import_sessions(source: Source, workspace: Path, report: ImportReport, dry_run: bool,
                     forgotten: Matcher) -> None:
    for item in source.sessions:
        path = workspace / "sessions" / f"{session_file_stem(item.key)}.jsonl"
        if path.exists():
            if _imported_from(path) != source.kind:
                report.warnings.append(f"session {item.key} already exists here; kept ours "
                                       f"({len(item.messages)} message(s) of {item.origin_key or item.key} not imported)")
            continue
        report.actions.append(f"convert session {item.origin_key or item.key} -> {item.key} "
                              f"({len(item.messages)} messages)")
        if dry_run:
            continue
        messages = [redact_message(m, forgotten) for m in item.messages]
        if _dangling(messages):
            messages.append({"role": "assistant", "content": CLOSING_NOTE, "status": "imported"})
        header = {"_type": "metadata", "v": FORMAT_VERSION, "key": item.key,
                  "created_at": item.created_at or "", "updated_at": item.updated_at or item.created_at or "",
                  "metadata": {"imported_from": source.kind, "origin_key": item.origin_key},
                  "last_consolidated": min(item.last_consolidated, len(messages))}
        lines = [json.dumps(header, ensure_ascii=False)] + [json.dumps(m, ensure_ascii=False) for m in messages]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "\n".join(lines) + "\n")


def _imported_from(path: Path) -> str | None:
    try:
        with path.open("r", encoding="utf-8") as fh:
            header = json.loads(fh.readline())
        return str((header.get("metadata") or {}).get("imported_from") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


def _dangling(messages: list[dict[str, Any]]) -> bool:
    for message in reversed(messages):
        role = message.get("role")
        if role in ("user", "tool"):
            return True
        if role == "assistant":
            return bool(message.get("tool_calls"))
    return False


def _offer_channels(source: Source, config_path: Path | None, report: ImportReport, *, dry_run: bool) -> None:
    if not source.channels:
        return
    document: dict[str, Any] = {}
    if config_path is not None and config_path.exists():
        document = json.loads(config_path.read_text(encoding="utf-8"))
    channels = document.setdefault("channels", {})
    changed = False
    for name, offer in source.channels.items():
        section = channels.setdefault(name, {})
        before = json.dumps(section, sort_keys=True)
        for key, value in offer.items():
            current = section.get(key)
            if isinstance(value, list):
                merged = list(dict.fromkeys([*(current or []), *value]))
                if merged != (current or []):
                    section[key] = merged
                    changed = True
                    report.offers.append(f"channels.{name}.{key} += {[v for v in value if v not in (current or [])]}")
            elif not current:
                section[key] = value
                changed = True
                shown = "****" if "token" in key.lower() else value
                report.offers.append(f"channels.{name}.{key} = {shown}")
        if json.dumps(section, sort_keys=True) != before and not section.get("enabled"):
            section["enabled"] = True
    if not changed or dry_run or config_path is None:
        return
    config_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, json.dumps(document, indent=2) + "\n")
    os.chmod(config_path, 0o600)


def _existing_history(path: Path) -> set[tuple[str, str]]:
    """(timestamp, content) of our live history: an entry we already hold is not added again."""
    found: set[tuple[str, str]] = set()
    if not path.exists():
        return found
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                entry = json.loads(line)
                found.add((str(entry.get("timestamp") or ""), str(entry["content"])))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return found


def _load_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
