"""Read a nanobot installation (default ``~/.nanobot``) into a ``Source``.

nanobot's documented layout (docs/memory.md, its config and session store):

    ~/.nanobot/config.json                    channels.<name>.{token|botToken|appToken, allowFrom},
                                              agents.defaults.workspace
    <workspace>/SOUL.md, USER.md, memory/MEMORY.md
    <workspace>/memory/history.jsonl          {"cursor", "timestamp", "content"} per line
    <workspace>/memory/HISTORY.md             older format: "[YYYY-MM-DD HH:MM] text" entries
    <workspace>/skills/<name>/SKILL.md
    sessions, newest layout first:
      ~/.nanobot/sessions/<workspace id>/*.jsonl   (id in <workspace>/.nanobot/workspace-id)
      <workspace>/sessions/*.jsonl                 (older: inside the workspace)
      ~/.nanobot/sessions/*.jsonl                  (oldest: one global folder)
    a session file: line 1 {"_type": "metadata", "key", "created_at", "updated_at",
    "last_consolidated", ...}, maybe {"_type": "provider_state"}, then one message per line
    in the OpenAI chat format.

Session keys are ``<channel>:<chat_id>`` (Slack threads ``slack:<channel>:<thread_ts>``),
the same scheme as ours; the terminal's ``cli:<id>`` becomes our ``cli:local`` and the
OpenAI-compatible API's ``api:<id>`` our ``openai:<id>``.

Every file is read through ``SourceFiles``: links, hard links, special files and anything
resolving outside the nanobot folder (or the workspace its config names) are refused.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from lucidgate.gateway.migrate.model import HistoryItem, SessionItem, Source, text_of
from lucidgate.gateway.migrate.safe_files import SourceFiles

logger = logging.getLogger(__name__)

_LEGACY_ENTRY = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]\s*(.*)$")
_DAILY = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "timestamp")


def read_nanobot(root: Path) -> Source:
    root = root.expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist; pass the nanobot folder (default ~/.nanobot)")
    source = Source("nanobot", root)
    config = _load_json(root / "config.json", SourceFiles(root, warnings=source.warnings))
    configured = _dig(config, "agents", "defaults", "workspace")
    workspace = Path(str(configured or root / "workspace")).expanduser()
    if not workspace.is_absolute():
        workspace = root / workspace
    # The workspace its config names is part of the source (nanobot's documented layout).
    files = SourceFiles(root, *([workspace] if configured else []), warnings=source.warnings)
    if not files.is_dir(workspace):
        source.warnings.append(f"no workspace at {workspace}")
    else:
        for ours, theirs in (("SOUL.md", "SOUL.md"), ("USER.md", "USER.md"), ("memory/MEMORY.md", "memory/MEMORY.md")):
            content = files.read_text(workspace / theirs)
            if content is not None:
                source.memory_files[ours] = content
        if files.is_dir(workspace / "memory"):
            source.history = _history(workspace / "memory", source, files)
        source.skills = files.skill_folders(workspace / "skills")
    for folder in _session_folders(root, workspace, files):
        for path in sorted(folder.glob("*.jsonl")):
            item = _session(path, source, files)
            if item is not None and all(s.key != item.key for s in source.sessions):
                source.sessions.append(item)
    source.channels = _channels(config)
    return source


def _history(memory: Path, source: Source, files: SourceFiles) -> list[HistoryItem]:
    items: list[HistoryItem] = []
    jsonl = memory / "history.jsonl"
    content = files.read_text(jsonl)
    if content is not None:
        for n, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                content = str(entry["content"])
            except (ValueError, KeyError, TypeError):
                source.warnings.append(f"{jsonl.name} line {n} is not a history entry; skipped")
                continue
            items.append(HistoryItem(str(entry.get("timestamp") or ""), content))
    legacy = files.read_text(memory / "HISTORY.md")
    if legacy is not None:
        items.extend(parse_legacy_history(legacy))
    return items


def parse_legacy_history(text: str) -> list[HistoryItem]:
    """``[YYYY-MM-DD HH:MM] text`` entries; continuation lines belong to the entry above."""
    items: list[HistoryItem] = []
    stamp: str | None = None
    lines: list[str] = []

    def flush() -> None:
        body = "\n".join(lines).strip()
        if stamp is not None and body:
            items.append(HistoryItem(stamp, body))

    for line in text.replace("\r\n", "\n").split("\n"):
        match = _LEGACY_ENTRY.match(line)
        if match:
            flush()
            stamp, lines = match.group(1), [match.group(2)]
        elif stamp is not None:
            lines.append(line)
    flush()
    return items


def _session_folders(root: Path, workspace: Path, files: SourceFiles) -> list[Path]:
    folders: list[Path] = []
    runtime = root / "sessions"
    marker = files.read_text(workspace / ".nanobot" / "workspace-id")
    if marker is not None and marker.strip() and "/" not in marker.strip() and marker.strip() != "..":
        folders.append(runtime / marker.strip())
    if os.path.lexists(runtime) and files.is_dir(runtime):
        folders.extend(p for p in sorted(runtime.iterdir()) if p.is_dir() and p not in folders)
    folders.extend([workspace / "sessions", runtime])
    unique = list(dict.fromkeys(folders))
    return [f for f in unique if os.path.lexists(f) and files.is_dir(f)]


def map_key(key: str) -> str:
    channel, _, rest = key.partition(":")
    if channel == "cli":
        return "cli:local"
    if channel == "api":
        return f"openai:{rest or 'default'}"
    return key


def _session(path: Path, source: Source, files: SourceFiles) -> SessionItem | None:
    header: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    content = files.read_text(path)
    if content is None:
        return None
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            source.warnings.append(f"{path.name} line {n} is not JSON; skipped")
            continue
        if not isinstance(record, dict):
            continue
        if record.get("_type") == "metadata":
            header = record
        elif "_type" in record:
            continue  # provider state and other bookkeeping records
        elif record.get("role") in ("user", "assistant", "tool"):
            message = {k: record[k] for k in _MESSAGE_KEYS if k in record}
            if not isinstance(message.get("content"), str) and message.get("content") is not None:
                message["content"] = text_of(message["content"])
            messages.append(message)
    key = str(header.get("key") or path.stem.replace("_", ":", 1))
    if not messages:
        return None
    consolidated = header.get("last_consolidated", 0)
    return SessionItem(key=map_key(key), messages=messages, created_at=header.get("created_at"),
                       updated_at=header.get("updated_at"), origin_key=key,
                       last_consolidated=consolidated if isinstance(consolidated, int)
                       and 0 <= consolidated <= len(messages) else 0)


def _channels(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    offers: dict[str, dict[str, Any]] = {}
    telegram = _dig(config, "channels", "telegram") or {}
    if isinstance(telegram, dict) and telegram.get("token"):
        offers["telegram"] = {"token": str(telegram["token"]),
                              "allowFrom": [str(x) for x in telegram.get("allowFrom") or []]}
    slack = _dig(config, "channels", "slack") or {}
    if isinstance(slack, dict) and slack.get("botToken"):
        offer = {"botToken": str(slack["botToken"]), "allowFrom": [str(x) for x in slack.get("allowFrom") or []]}
        if slack.get("appToken"):
            offer["appToken"] = str(slack["appToken"])
        offers["slack"] = offer
    return offers


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _load_json(path: Path, files: SourceFiles) -> dict[str, Any]:
    text = files.read_text(path)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); fix it or import without it") from None
    return data if isinstance(data, dict) else {}
