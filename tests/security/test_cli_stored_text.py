"""The terminal tables print stored words as words: a chat id, a reminder text or a session key
chosen by a stranger is neither rich markup (``[/oops]`` made rich raise, ``[link=…]`` became a
link) nor a terminal escape sequence, in ``lucid sessions``, ``lucid jobs`` and ``lucid usage``.
Each command runs as a real subprocess over a workspace holding such words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from lucidgate.config import Config
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.protocols import Usage

LUCID = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()"]
ESC = "\x1b"
HOSTILE_CHAT = "[/oops]"
LINKED_CHAT = "[link=https://evil.example]click[/link]"
TITLE_ESCAPE = f"{ESC}]0;pwned\x07{ESC}[2J"


def run(*args: str, config: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    env.update(HOME=str(home), COLUMNS="250")
    return subprocess.run([*LUCID, *args, "--config", str(config)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def hostile_workspace(tmp_path: Path) -> Path:
    """A config whose workspace holds a stranger's session keys, reminder text and usage."""
    workspace = tmp_path / "ws"
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    parts = WorkspaceParts(Config.model_validate(json.loads(config_path.read_text())))
    sessions = workspace / "sessions"
    sessions.mkdir(parents=True)
    now = datetime.now(UTC).isoformat()
    for chat in (HOSTILE_CHAT, LINKED_CHAT, TITLE_ESCAPE):
        key = f"webhook:{chat}"
        header = {"_type": "metadata", "v": 1, "key": key, "created_at": now, "updated_at": now,
                  "metadata": {}, "last_consolidated": 0}
        (sessions / f"{session_file_stem(key)}.jsonl").write_text(json.dumps(header) + "\n")
    parts.reminders.add(session_key=f"webhook:{HOSTILE_CHAT}", channel="webhook", chat_id=HOSTILE_CHAT,
                        thread_id=None, kind="every", spec="3600", text=f"water {TITLE_ESCAPE} [/oops] the plants",
                        created_at=datetime.now(UTC))
    parts.usage.record(job="turn", session_key=f"webhook:{LINKED_CHAT}", model="openai/fake",
                       usage=Usage(10, 2, 0))
    parts.usage.record(job="turn", session_key=f"webhook:{HOSTILE_CHAT}", model="openai/fake",
                       usage=Usage(10, 2, 0))
    return config_path


def assert_shown_as_text(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr
    assert ESC not in proc.stdout and "\x07" not in proc.stdout  # nothing for the terminal to act on
    assert "\x1b]8;" not in proc.stdout  # no OSC 8 hyperlink
    for word in words:
        assert word in proc.stdout, proc.stdout


def test_sessions_lists_hostile_chat_ids_as_text(tmp_path: Path) -> None:
    config = hostile_workspace(tmp_path)
    proc = run("sessions", config=config, home=tmp_path)
    assert_shown_as_text(proc, f"webhook:{HOSTILE_CHAT}", f"webhook:{LINKED_CHAT}", "]0;pwned")


def test_jobs_lists_a_hostile_reminder_as_text(tmp_path: Path) -> None:
    config = hostile_workspace(tmp_path)
    proc = run("jobs", config=config, home=tmp_path)
    assert_shown_as_text(proc, f"webhook:{HOSTILE_CHAT}", "[/oops] the plants")


def test_usage_lists_hostile_session_keys_as_text(tmp_path: Path) -> None:
    config = hostile_workspace(tmp_path)
    proc = run("usage", "--days", "1", config=config, home=tmp_path)
    assert_shown_as_text(proc, f"webhook:{HOSTILE_CHAT}", f"webhook:{LINKED_CHAT}")
