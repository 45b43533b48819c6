"""Read an OpenClaw installation (default ``~/.openclaw``) into a ``Source``.

OpenClaw's documented layout (docs: concepts/agent-workspace, reference/session-management):

    ~/.openclaw/openclaw.json       JSON5; agents.defaults.workspace,
                                    channels.telegram.{botToken, allowFrom},
                                    channels.slack.{botToken, appToken, allowFrom}
    <workspace> (default ~/.openclaw/workspace): SOUL.md, USER.md, MEMORY.md (at the root),
                                    memory/YYYY-MM-DD.md daily notes, skills/<name>/SKILL.md
    ~/.openclaw/agents/<agentId>/sessions/sessions.json   sessionKey -> {"sessionId", ...}
    ~/.openclaw/agents/<agentId>/sessions/<sessionId>.jsonl
        line 1 {"type": "session", "id", "timestamp", "cwd"}; then entries with "id" and
        "parentId": {"type": "message", "timestamp", "message": {"role": "user" |
        "assistant" | "toolResult", "content": str | [{"type": "text"|"toolCall"|...}],
        "toolCallId", "toolName", "isError"}}, "compaction" summaries, model changes, ...

Daily notes become history entries (one per note, dated that day) and are kept as our own
daily notes too. Session keys ``agent:<id>:<rest>`` lose the agent prefix; the per-agent
main DM session ``agent:<id>:main`` becomes ``openclaw:main``; ``<channel>:direct:<peer>``
becomes ``<channel>:<peer>``, our key for a private chat on that channel.

Every file is read through ``SourceFiles``: links, hard links, special files and anything
resolving outside the OpenClaw folder (or the workspace its config names) are refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lucidgate.gateway.migrate.model import HistoryItem, SessionItem, Source, text_of
from lucidgate.gateway.migrate.safe_files import SourceFiles

_DAILY = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")


def read_openclaw(root: Path) -> Source:
    import json5

    root = root.expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist; pass the OpenClaw folder (default ~/.openclaw)")
    config: dict[str, Any] = {}
    config_path = root / "openclaw.json"
    warnings: list[str] = []
    text = SourceFiles(root, warnings=warnings).read_text(config_path)
    if text is not None:
        try:
            loaded = json5.loads(text)
        except ValueError as exc:
            raise ValueError(f"{config_path} is not valid JSON5 ({exc}); fix it or import without it") from None
        config = loaded if isinstance(loaded, dict) else {}
    workspace_value = ((config.get("agents") or {}).get("defaults") or {}).get("workspace")
    workspace = Path(str(workspace_value)).expanduser() if workspace_value else root / "workspace"
    source = Source("openclaw", root, warnings=warnings)
    # The workspace its config names is part of the source (OpenClaw's documented layout).
    files = SourceFiles(root, *([workspace] if workspace_value else []), warnings=warnings)
    if files.is_dir(workspace):
        _read_workspace(workspace, files, source)
    else:
        source.warnings.append(f"no workspace at {workspace}")
    agents = root / "agents"
    if files.is_dir(agents):
        for agent_dir in sorted(p for p in agents.iterdir() if files.is_dir(p)):
            _read_sessions(agent_dir / "sessions", source, files)
    source.channels = _channels(config)
    return source


def _read_workspace(workspace: Path, files: SourceFiles, source: Source) -> None:
    for ours, theirs in (("SOUL.md", "SOUL.md"), ("USER.md", "USER.md"), ("memory/MEMORY.md", "MEMORY.md")):
        content = files.read_text(workspace / theirs)
        if content is not None:
            source.memory_files[ours] = content
    memory = workspace / "memory"
    if files.is_dir(memory):
        for path in sorted(memory.iterdir()):
            match = _DAILY.match(path.name)
            content = files.read_text(path) if match else None
            if match and content is not None:
                source.daily_notes[f"memory/{path.name}"] = content
                if content.strip():
                    source.history.append(HistoryItem(f"{match.group(1)} 23:59", content.strip()))
    source.skills = files.skill_folders(workspace / "skills")


def map_key(key: str) -> str:
    parts = key.split(":")
    if len(parts) >= 3 and parts[0] == "agent":
        parts = parts[2:]
    if parts == ["main"]:
        return "openclaw:main"
    if len(parts) >= 3 and parts[1] in ("direct", "dm"):
        return f"{parts[0]}:{':'.join(parts[2:])}"
    return ":".join(parts)


def _read_sessions(folder: Path, source: Source, files: SourceFiles) -> None:
    if not files.is_dir(folder):
        return
    store: dict[str, Any] = {}
    index = files.read_text(folder / "sessions.json")
    if index is not None:
        try:
            loaded = json.loads(index)
            store = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            source.warnings.append(f"{folder / 'sessions.json'} is not valid JSON; transcripts kept by id")
    by_id = {str(v.get("sessionId")): k for k, v in store.items() if isinstance(v, dict) and v.get("sessionId")}
    for path in sorted(folder.glob("*.jsonl")):
        session_id = path.stem.split("-topic-")[0]
        origin = by_id.get(session_id) or f"session:{session_id}"
        content = files.read_text(path)
        if content is None:
            continue
        item = _transcript(path, content, origin, source)
        if item is not None and all(s.key != item.key for s in source.sessions):
            source.sessions.append(item)


def _transcript(path: Path, content: str, origin: str, source: Source) -> SessionItem | None:
    messages: list[dict[str, Any]] = []
    created: str | None = None
    kept_from: str | None = None
    ids: list[str] = []
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            source.warnings.append(f"{path.name} line {n} is not JSON; skipped")
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind == "session":
            created = entry.get("timestamp")
        elif kind == "compaction":
            kept_from = entry.get("firstKeptEntryId")
        elif kind == "message" and isinstance(entry.get("message"), dict):
            converted = _message(entry["message"], entry.get("timestamp"))
            if converted is not None:
                messages.append(converted)
                ids.append(str(entry.get("id")))
    if not messages:
        return None
    consolidated = ids.index(kept_from) if kept_from in ids else 0
    return SessionItem(key=map_key(origin), messages=messages, created_at=created,
                       updated_at=messages[-1].get("timestamp"), origin_key=origin,
                       last_consolidated=consolidated)


def _message(message: dict[str, Any], timestamp: Any) -> dict[str, Any] | None:
    role = message.get("role")
    content = message.get("content")
    stamp = {"timestamp": str(timestamp)} if timestamp else {}
    if role == "user":
        return {"role": "user", "content": text_of(content), **stamp}
    if role == "assistant":
        calls = [{"id": str(p.get("id", "")), "type": "function",
                  "function": {"name": str(p.get("name", "")),
                               "arguments": json.dumps(p.get("arguments") or {}, ensure_ascii=False)}}
                 for p in content or [] if isinstance(p, dict) and p.get("type") == "toolCall"]
        out: dict[str, Any] = {"role": "assistant", "content": text_of(content) or None, **stamp}
        if calls:
            out["tool_calls"] = calls
        return out
    if role == "toolResult":
        text = text_of(content)
        if message.get("isError"):
            text = f"Error: {text}"
        return {"role": "tool", "tool_call_id": str(message.get("toolCallId", "")),
                "name": str(message.get("toolName", "")), "content": text, **stamp}
    return None


def _channels(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    channels = config.get("channels") or {}
    offers: dict[str, dict[str, Any]] = {}
    telegram = channels.get("telegram") if isinstance(channels, dict) else None
    if isinstance(telegram, dict) and telegram.get("botToken"):
        offers["telegram"] = {"token": str(telegram["botToken"]),
                              "allowFrom": [str(x) for x in telegram.get("allowFrom") or [] if str(x) != "*"]}
    slack = channels.get("slack") if isinstance(channels, dict) else None
    if isinstance(slack, dict) and slack.get("botToken"):
        offer: dict[str, Any] = {"botToken": str(slack["botToken"]),
                                 "allowFrom": [str(x) for x in slack.get("allowFrom") or [] if str(x) != "*"]}
        if slack.get("appToken"):
            offer["appToken"] = str(slack["appToken"])
        offers["slack"] = offer
    return offers
