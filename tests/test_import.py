"""`lucid import nanobot|openclaw`: fixtures built in each peer's documented on-disk format
(nanobot: config.json, workspace memory files, memory/history.jsonl or HISTORY.md, JSONL
sessions with a metadata line; OpenClaw: JSON5 openclaw.json, root MEMORY.md, dated daily
notes, agents/<id>/sessions/sessions.json + tree-structured transcripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from lucidgate.gateway.cli import build_app
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.sessions import load_session_file

TG_TOKEN = "123456:nanobot-telegram-token"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def make_nanobot(root: Path, *, legacy_history: bool = False) -> Path:
    ws = root / "workspace"
    (ws / "memory").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(ws), "model": "anthropic/claude-opus-4-5"}},
        "channels": {"telegram": {"enabled": True, "token": TG_TOKEN, "allowFrom": ["4242"]},
                     "slack": {"enabled": False, "botToken": "", "appToken": ""}},
    }))
    (ws / "SOUL.md").write_text("# Soul\n\n- Speak plainly.\n- Use metric units.\n")
    (ws / "USER.md").write_text("# User\n\n- Name: Grace\n- Lives in Lisbon\n")
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n\n- Project Atlas uses PostgreSQL 16\n")
    if legacy_history:
        (ws / "memory" / "HISTORY.md").write_text(
            "[2025-01-03 09:15] - Grace asked about tide tables\n  continued detail\n\n"
            "[2025-01-04 18:00] - Decided on weekly reviews\n")
    else:
        write_jsonl(ws / "memory" / "history.jsonl", [
            {"cursor": 7, "timestamp": "2026-04-03 00:02", "content": "- User prefers dark mode"},
            {"cursor": 8, "timestamp": "2026-04-04 10:30", "content": "- Decided to use PostgreSQL"},
        ])
    (ws / "memory" / ".cursor").write_text("8")
    (ws / "skills" / "weekly-review").mkdir(parents=True)
    (ws / "skills" / "weekly-review" / "SKILL.md").write_text("---\nname: weekly-review\n---\nReview the week.\n")
    # Sessions in nanobot's runtime store: ~/.nanobot/sessions/<workspace id>/<key>.jsonl
    workspace_id = "0123456789abcdef0123456789abcdef"
    (ws / ".nanobot").mkdir()
    (ws / ".nanobot" / "workspace-id").write_text(workspace_id + "\n")
    write_jsonl(root / "sessions" / workspace_id / "telegram_4242.jsonl", [
        {"_type": "metadata", "key": "telegram:4242", "created_at": "2026-04-01T10:00:00",
         "updated_at": "2026-04-02T11:00:00", "metadata": {}, "last_consolidated": 2},
        {"_type": "provider_state", "state": {"opaque": True}},
        {"role": "user", "content": "remember my tide tables", "timestamp": "2026-04-01T10:00:00"},
        {"role": "assistant", "content": "Noted.", "timestamp": "2026-04-01T10:00:05"},
        {"role": "user", "content": "what's the weather?", "timestamp": "2026-04-02T11:00:00"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "web_search", "content": "sunny"},
        {"role": "assistant", "content": "Sunny today."},
    ])
    write_jsonl(root / "sessions" / workspace_id / "cli_direct.jsonl", [
        {"_type": "metadata", "key": "cli:direct", "created_at": "2026-04-05T08:00:00",
         "updated_at": "2026-04-05T08:00:00", "metadata": {}, "last_consolidated": 0},
        {"role": "user", "content": "left hanging", "timestamp": "2026-04-05T08:00:00"},
    ])
    return root


def make_openclaw(root: Path) -> Path:
    ws = root / "workspace"
    (ws / "memory").mkdir(parents=True)
    (root / "openclaw.json").write_text("""// OpenClaw config (JSON5)
{
  agents: { defaults: { workspace: "%s" } },
  channels: {
    telegram: { enabled: true, botToken: "999:claw-token", dmPolicy: "allowlist", allowFrom: ["777"], },
  },
}
""" % ws)
    (ws / "SOUL.md").write_text("# SOUL.md - Who You Are\n\nBe genuinely helpful.\n")
    (ws / "USER.md").write_text("# USER.md\n\n- **Name**: Lin\n- **Timezone**: Asia/Shanghai\n")
    (ws / "MEMORY.md").write_text("# MEMORY.md\n\n- 2026-01-05: chose TypeScript for the bot\n")
    (ws / "memory" / "2026-03-01.md").write_text("- Lin started a garden\n")
    (ws / "memory" / "2026-03-02.md").write_text("- Tomatoes planted\n")
    (ws / "skills" / "garden").mkdir(parents=True)
    (ws / "skills" / "garden" / "SKILL.md").write_text("---\nname: garden\n---\nWater daily.\n")
    sessions = root / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps({
        "agent:main:main": {"sessionId": "aaaa-1111", "updatedAt": 1767000000000},
        "agent:main:telegram:direct:777": {"sessionId": "bbbb-2222", "chatType": "direct"},
    }))
    write_jsonl(sessions / "aaaa-1111.jsonl", [
        {"type": "session", "version": 3, "id": "aaaa-1111", "timestamp": "2026-03-01T08:00:00.000Z", "cwd": str(ws)},
        {"type": "model_change", "id": "m1", "parentId": None, "provider": "anthropic", "modelId": "claude"},
        {"type": "message", "id": "e1", "parentId": "m1", "timestamp": "2026-03-01T08:00:01.000Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "plan my garden"}]}},
        {"type": "message", "id": "e2", "parentId": "e1", "timestamp": "2026-03-01T08:00:03.000Z",
         "message": {"role": "assistant", "content": [
             {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Let me check."},
             {"type": "toolCall", "id": "tc1", "name": "read", "arguments": {"path": "memory/2026-03-01.md"}}]}},
        {"type": "message", "id": "e3", "parentId": "e2", "timestamp": "2026-03-01T08:00:04.000Z",
         "message": {"role": "toolResult", "toolCallId": "tc1", "toolName": "read",
                     "content": [{"type": "text", "text": "- Lin started a garden"}], "isError": False}},
        {"type": "message", "id": "e4", "parentId": "e3", "timestamp": "2026-03-01T08:00:06.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "Start with tomatoes."}]}},
    ])
    write_jsonl(sessions / "bbbb-2222.jsonl", [
        {"type": "session", "version": 3, "id": "bbbb-2222", "timestamp": "2026-03-02T09:00:00.000Z", "cwd": str(ws)},
        {"type": "message", "id": "f1", "parentId": None, "timestamp": "2026-03-02T09:00:01.000Z",
         "message": {"role": "user", "content": "hi from telegram"}},
        {"type": "message", "id": "f2", "parentId": "f1", "timestamp": "2026-03-02T09:00:02.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "hello Lin"}]}},
    ])
    return root


def setup_lucid(tmp_path: Path, workspace: Path) -> Path:
    """A lucid config whose workspace already has its own USER.md line."""
    config = tmp_path / "lucid.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}},
                                  "channels": {"webhook": {"token": "wh"}}}))
    run(["onboard", "-c", str(config)])
    (workspace / "USER.md").write_text("# User\n\n- Name: Grace\n- Likes green tea\n")
    return config


def run(args: list[str]) -> str:
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    return result.output


def tree(workspace: Path) -> dict[str, bytes]:
    return {str(p.relative_to(workspace)): p.read_bytes() for p in sorted(workspace.rglob("*"))
            if p.is_file() and ".git" not in p.parts and p.name != "gateway.lock"}


def test_nanobot_import_merges_converts_and_is_idempotent(tmp_path: Path, workspace: Path) -> None:
    nb = make_nanobot(tmp_path / "nanobot")
    config = setup_lucid(tmp_path, workspace)

    planned = run(["import", "nanobot", str(nb), "--dry-run", "-c", str(config)])
    assert "would take SOUL.md" in planned and "would merge into USER.md" in planned and "would append 2 history entries" in planned
    assert "would convert session telegram:4242 -> telegram:4242 (6 messages)" in planned
    assert not (workspace / "skills" / "weekly-review").exists()  # a dry run writes nothing
    assert "channels.telegram.token = ****" in planned and TG_TOKEN not in planned

    out = run(["import", "nanobot", str(nb), "--channels", "-c", str(config)])
    assert "memory commit" in out
    user = (workspace / "USER.md").read_text()
    assert "- Likes green tea" in user and "- Lives in Lisbon" in user  # merged, not overwritten
    assert user.count("Name: Grace") == 1
    assert (workspace / "SOUL.md").read_text().startswith("# Soul\n\n- Speak plainly.")  # template replaced
    assert "PostgreSQL 16" in (workspace / "memory" / "MEMORY.md").read_text()
    history = [json.loads(x) for x in (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    assert [(h["cursor"], h["timestamp"], h["content"]) for h in history] == [
        (1, "2026-04-03 00:02", "- User prefers dark mode"), (2, "2026-04-04 10:30", "- Decided to use PostgreSQL")]
    assert (workspace / "memory" / ".dream_cursor").read_text().strip() == "2"
    session = load_session_file(workspace / "sessions" / "telegram_4242.jsonl")
    assert session.key == "telegram:4242" and session.last_consolidated == 2
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert session.pending_state() is None
    hanging = load_session_file(workspace / "sessions" / "cli_local.jsonl")
    assert hanging.messages[0]["content"] == "left hanging" and hanging.pending_state() is None
    assert (workspace / "skills" / "weekly-review" / "SKILL.md").exists()
    lucid_config = json.loads(config.read_text())
    assert lucid_config["channels"]["telegram"]["token"] == TG_TOKEN
    assert lucid_config["channels"]["telegram"]["allowFrom"] == ["4242"]
    [commit] = [c for c in GitStore(workspace).log(10) if c.message.startswith("import:")]
    assert {"USER.md", "SOUL.md", "memory/MEMORY.md", "skills/weekly-review/SKILL.md"} <= set(commit.files)

    before = tree(workspace)
    commits = len(GitStore(workspace).log(50))
    again = run(["import", "nanobot", str(nb), "--channels", "-c", str(config)])
    assert "nothing to import" in again
    assert tree(workspace) == before and len(GitStore(workspace).log(50)) == commits
    assert json.loads(config.read_text()) == lucid_config


def test_nanobot_legacy_history_md_is_parsed(tmp_path: Path, workspace: Path) -> None:
    nb = make_nanobot(tmp_path / "nanobot", legacy_history=True)
    config = setup_lucid(tmp_path, workspace)
    run(["import", "nanobot", str(nb), "-c", str(config)])
    history = [json.loads(x) for x in (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    assert [(h["timestamp"], h["content"]) for h in history] == [
        ("2025-01-03 09:15", "- Grace asked about tide tables\n  continued detail"),
        ("2025-01-04 18:00", "- Decided on weekly reviews")]
    assert all(h["session_key"] == "import:nanobot" for h in history)
    assert "channels.telegram" not in json.dumps(json.loads(config.read_text()).get("channels", {}).get("telegram", {}))


def test_openclaw_import(tmp_path: Path, workspace: Path) -> None:
    oc = make_openclaw(tmp_path / "openclaw")
    config = setup_lucid(tmp_path, workspace)
    out = run(["import", "openclaw", str(oc), "-c", str(config)])
    assert "channels.telegram.token = ****" in out  # offered, not written without --channels
    assert "telegram" not in json.loads(config.read_text())["channels"]
    assert "chose TypeScript" in (workspace / "memory" / "MEMORY.md").read_text()
    assert (workspace / "memory" / "2026-03-02.md").read_text() == "- Tomatoes planted\n"
    history = [json.loads(x) for x in (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    assert [(h["timestamp"][:10], h["content"]) for h in history] == [
        ("2026-03-01", "- Lin started a garden"), ("2026-03-02", "- Tomatoes planted")]
    main = load_session_file(workspace / "sessions" / "openclaw_main.jsonl")
    assert main.key == "openclaw:main"
    assert [m["role"] for m in main.messages] == ["user", "assistant", "tool", "assistant"]
    assert main.messages[1]["tool_calls"][0]["function"] == {"name": "read", "arguments":
                                                             '{"path": "memory/2026-03-01.md"}'}
    assert main.messages[2]["tool_call_id"] == "tc1" and main.messages[2]["content"] == "- Lin started a garden"
    direct = load_session_file(workspace / "sessions" / "telegram_777.jsonl")
    assert [m["content"] for m in direct.messages] == ["hi from telegram", "hello Lin"]
    assert (workspace / "skills" / "garden" / "SKILL.md").exists()
    log = GitStore(workspace).log(5)
    assert log[0].message.startswith("import: openclaw") and "memory/2026-03-01.md" in log[0].files
    before = tree(workspace)
    again = run(["import", "openclaw", str(oc), "-c", str(config)])
    assert "convert session" not in again and "append" not in again and "merge" not in again
    assert tree(workspace) == before


def test_bad_sources_fail_clearly(tmp_path: Path, workspace: Path) -> None:
    config = setup_lucid(tmp_path, workspace)
    result = CliRunner().invoke(build_app(), ["import", "nanobot", str(tmp_path / "missing"), "-c", str(config)])
    assert result.exit_code == 1 and "does not exist" in result.output
    broken = tmp_path / "oc"
    broken.mkdir()
    (broken / "openclaw.json").write_text("{ not json5 ")
    result = CliRunner().invoke(build_app(), ["import", "openclaw", str(broken), "-c", str(config)])
    assert result.exit_code == 1 and "not valid JSON5" in result.output


def test_imported_history_is_stamped_in_the_configured_timezone(tmp_path: Path, workspace: Path) -> None:
    """The import appends through the workspace's configured MemoryStore (WorkspaceParts), not
    one of its own: an entry without a time of its own gets the owner's local time."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    nb = make_nanobot(tmp_path / "nanobot")
    write_jsonl(nb / "workspace" / "memory" / "history.jsonl", [{"cursor": 1, "content": "- Undated lesson"}])
    config = setup_lucid(tmp_path, workspace)
    doc = json.loads(config.read_text())
    doc["agents"]["defaults"]["timezone"] = "Pacific/Kiritimati"  # UTC+14: never the default
    config.write_text(json.dumps(doc))

    run(["import", "nanobot", str(nb), "-c", str(config)])

    history = [json.loads(x) for x in (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    [entry] = [e for e in history if e["content"] == "- Undated lesson"]
    stamped = datetime.strptime(entry["timestamp"], "%Y-%m-%d %H:%M").replace(tzinfo=ZoneInfo("Pacific/Kiritimati"))
    assert abs(datetime.now(ZoneInfo("UTC")) - stamped) < timedelta(hours=1), entry  # 14 h off in UTC
