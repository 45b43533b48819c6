"""Item 4 of issue 27: owner-only paths, one table in code, enforced for every tool and role.

Over real HTTP: a webhook guest whose owner granted ``write_file``, ``edit_file``, ``read_file``
and even ``exec`` (``tools.guestTools``) is told by the model to rewrite the owner's prompt
files, plant a skill, blank ``.gitignore``, replace ``gateway.lock``, hook ``.git`` and write
the gateway's state, transcripts and databases. Every attempt is refused and every file is
byte-identical afterwards. docs/security.md prints the same table the code
enforces.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.files import EditFile, ReadFile, WriteFile
from lucidgate.gateway.tools.turn import TurnContext
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls, message_text
from tests.security._trust1_kit import guest_post, hook_document, load, serving

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
PWNED = "pwned by a guest"
EXISTING = {
    "SOUL.md": "# Soul\n\nCalm and brief.\n",
    "AGENTS.md": "# Agents\n\nBe careful.\n",
    "TOOLS.md": "# Tools\n\nUse them well.\n",
    "HEARTBEAT.md": "- check the mail\n",
    "USER.md": "- The owner likes tea.\n",
    "memory/MEMORY.md": "# Memory\n\n- The lake house.\n",
    "skills/tea/SKILL.md": "---\nname: tea\ndescription: brew tea\n---\nBoil water.\n",
    ".gitignore": "*.tmp\n",
    "gateway.lock": "12345\n",
    "state/owner_sessions.json": '["cli:local"]',
    "sessions/webhook_victim.jsonl": '{"_type":"metadata","key":"webhook:victim"}\n',
}
# Made by the gateway itself when it starts (the memory git store, the index, the outbox).
LIVE = (".git/config", ".git/HEAD", "memory/index.sqlite", "state/outbox.sqlite")
# One or more concrete spellings for every row of the table (checked against it below).
WRITES = [
    "SOUL.md", "AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "skills/tea/SKILL.md", "skills/evil/SKILL.md",
    "Skills/evil2/SKILL.md", ".gitignore", ".git/hooks/post-commit", ".git/config", "gateway.lock",
    "state/owner_sessions.json", "sessions/webhook_victim.jsonl", "memory/index.sqlite",
    "state/outbox.sqlite", "notes/cache.db", "notes/soul-link", "USER.md", "memory/MEMORY.md",
    "usage/ledger.jsonl", ".gitattributes", "notes/.GitAttributes", ".gitmodules", "notes/.mailmap",
]
EDITS = {"SOUL.md": "Calm", "AGENTS.md": "careful", "TOOLS.md": "well", ".gitignore": "*.tmp",
         "skills/tea/SKILL.md": "Boil", "gateway.lock": "12345", "HEARTBEAT.md": "mail"}


def seed(workspace: Path) -> None:
    for rel, text in EXISTING.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)
    (workspace / "notes").mkdir()
    os.symlink(workspace / "SOUL.md", workspace / "notes" / "soul-link")


def snapshot(workspace: Path, paths: Iterable[str]) -> dict[str, bytes | None]:
    return {rel: (workspace / rel).read_bytes() if (workspace / rel).is_file() else None for rel in paths}


def stray_files(workspace: Path) -> set[str]:
    """Files outside the gateway's own folders (git store, state, transcripts, memory, inbox)."""
    return {p.relative_to(workspace).as_posix() for p in workspace.rglob("*")
            if p.is_file() and not p.is_symlink()
            and p.relative_to(workspace).parts[0] not in (".git", "state", "sessions", "memory", "usage", "media")
            and not p.name.startswith("inbox")}


async def test_a_guest_granted_file_tools_cannot_write_any_owner_only_path(
        fake_llm: FakeLLMServer, tmp_path: Path, workspace: Path) -> None:
    seed(workspace)
    config = load(hook_document(workspace, fake_llm.base_url,
                                guestTools=["read_file", "write_file", "edit_file", "exec"]),
                  tmp_path / "config.json")
    calls: list[tuple[str, dict[str, Any]]] = [("write_file", {"path": p, "content": PWNED}) for p in WRITES]
    calls += [("edit_file", {"path": p, "old_text": old, "new_text": PWNED}) for p, old in EDITS.items()]
    calls += [("exec", {"command": f"echo {PWNED} > SOUL.md"})]
    calls += [("write_file", {"path": "notes/guest.md", "content": "allowed"})]  # the control
    fake_llm.queue(ToolCalls(calls), Reply("all done"))
    async with serving(config) as (server, client):
        watched = [*EXISTING, ".git/config", ".git/HEAD"]
        before = snapshot(workspace, watched)
        strays = stray_files(workspace)
        r = await client.post("/v1/messages", json=guest_post("g4", "mallory", "rewrite everything"))
        assert r.status_code == 200, r.text
        await server.state.gateway.parts.agent.idle()
        after = snapshot(workspace, watched)
        live = snapshot(workspace, LIVE)
    offered = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert {"write_file", "edit_file"} <= offered and "exec" not in offered
    results = [message_text(m) for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == len(calls)
    for (name, args), result in zip(calls[:-1], results[:-1], strict=True):
        assert result.startswith("Error:"), (name, args, result)
    assert not results[-1].startswith("Error"), results[-1]  # an ordinary file is still writable
    assert after == before
    assert all(data is not None and PWNED.encode() not in data for data in live.values()), live.keys()
    assert stray_files(workspace) - strays == {"notes/guest.md"}
    assert not (workspace / ".git" / "hooks" / "post-commit").exists()


def test_every_row_of_the_table_is_exercised_and_its_owner_column_is_true(tmp_path: Path) -> None:
    from lucidgate.gateway.tools._owner_paths import OWNER_ONLY, owner_only_reason
    from lucidgate.gateway.tools._paths import internal_reason

    def parts(raw: str) -> tuple[str, ...]:
        return tuple(raw.casefold().split("/"))

    root = tmp_path.resolve()
    for row in OWNER_ONLY:
        spelled = [p for p in WRITES if row.matches(parts(p))]
        assert spelled, row.pattern
        own = [p for p in spelled if sum(r.matches(parts(p)) for r in OWNER_ONLY) == 1]
        owner_refused = internal_reason(root, root / own[0], "read")
        assert bool(owner_refused) == row.owner.startswith("`exec` only"), (row.pattern, owner_refused)
    assert owner_only_reason(("notes", "guest.md"), "write") is None
    assert owner_only_reason(("soul.md",), "read") is None  # guests may read their prompt files
    assert owner_only_reason(("soul.md",), "write")


async def test_the_owner_still_writes_the_prompt_files_and_skills(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "SOUL.md").write_text("old")
    tools = ToolRegistry([ReadFile(), WriteFile(), EditFile()], guest_tools=["read_file", "write_file", "edit_file"])
    owner = TurnContext(session_key="cli:local", channel="cli", chat_id="local", sender_id="local",
                        role="owner", chat_type="private", workspace=ws)
    guest = TurnContext(session_key="webhook:g", channel="webhook", chat_id="g", sender_id="g",
                        role="guest", chat_type="private", workspace=ws)
    for rel in ("SOUL.md", "AGENTS.md", "skills/x/SKILL.md", ".gitignore"):
        result = await tools.execute(owner, "write_file", json.dumps({"path": rel, "content": "mine"}))
        assert not result.startswith("Error"), (rel, result)
        assert (ws / rel).read_text() == "mine"
        refused = await tools.execute(guest, "write_file", json.dumps({"path": rel, "content": PWNED}))
        assert refused.startswith("Error") and "owner" in refused, refused
    assert "mine" in await tools.execute(guest, "read_file", json.dumps({"path": "SOUL.md"}))


def test_the_security_guide_prints_the_table_the_code_enforces() -> None:
    from lucidgate.gateway.tools._owner_paths import markdown_table

    table = markdown_table()
    doc = SECURITY_DOC.read_text(encoding="utf-8")
    assert table in doc, "docs/security.md's owner-only table differs from gateway/tools/_owner_paths.py:\n" + table
    section = doc[doc.index("## Owner-only paths"):]
    assert section.index(table) < section.index("\n## ", 5)  # inside the owner-only paths section
    assert re.search(r"\| `SOUL.md` \|", table)


@pytest.mark.parametrize("raw", ["SOUL.md", "skills/a/b.md", ".git/HEAD", "state/x", "sessions/y.jsonl",
                                 "memory/index.sqlite", "state/outbox.sqlite", "gateway.lock", ".gitignore"])
def test_table_lookup_is_case_insensitive(raw: str) -> None:
    from lucidgate.gateway.tools._owner_paths import owner_only_reason

    assert owner_only_reason(tuple(raw.upper().casefold().split("/")), "write")
