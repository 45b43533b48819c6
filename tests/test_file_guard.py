"""The file tools' guard: the gateway's internal files are refused to everyone — by any
spelling, through symlinks and hard links — and a guest never reaches the owner's memory or
another chat's files, even when the owner grants guests the file tools."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.files import ListDir, ReadFile, WriteFile
from lucidgate.gateway.tools.search import Grep
from lucidgate.gateway.tools.turn import TurnContext
from tests.fakes.context import make_ctx

INTERNAL = [
    "sessions/webhook_1.jsonl", "SESSIONS/webhook_1.jsonl", "Sessions/./webhook_1.jsonl",
    "state/outbox.sqlite", "State/reminders.sqlite", "memory/history.jsonl", "memory/HISTORY.jsonl",
    "memory/archive/history-2026-01.jsonl", "memory/index.sqlite", "memory/index.sqlite-wal",
    "inbox.jsonl", "INBOX.jsonl", "config.json", "notes/link-to-transcript", "notes/hardlink.jsonl",
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    files = {
        "sessions/webhook_1.jsonl": '{"role":"user","content":"my PIN is 4321"}\n',
        "state/outbox.sqlite": "SQLite format 3 secret", "state/reminders.sqlite": "x",
        "memory/history.jsonl": '{"content":"- PIN 4321"}\n', "memory/archive/history-2026-01.jsonl": "old PIN\n",
        "memory/index.sqlite": "db", "memory/index.sqlite-wal": "db", "inbox.jsonl": "PIN\n",
        "config.json": '{"token": "PIN"}', "USER.md": "- the owner's PIN is 4321\n",
        "memory/MEMORY.md": "- PIN hint\n", "memory/2026-11-23.md": "- PIN today\n",
        "HEARTBEAT.md": "- check PIN\n", "notes/shared.md": "a public PIN policy\n",
        "media/webhook/guest/photo.txt": "own upload\n", "media/webhook/owner/scan.txt": "owner's PIN scan\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    os.symlink(root / "sessions" / "webhook_1.jsonl", root / "notes" / "link-to-transcript")
    os.link(root / "sessions" / "webhook_1.jsonl", root / "notes" / "hardlink.jsonl")
    return root


def registry() -> ToolRegistry:
    tools = [ReadFile(), WriteFile(), ListDir(), Grep()]
    return ToolRegistry(tools, max_result_chars=20_000, guest_tools=["read_file", "list_dir", "grep"])


async def call(ctx: TurnContext, tool: str, **args: object) -> str:
    return await registry().execute(ctx, tool, json.dumps(args))


def guest(ws: Path) -> TurnContext:
    return TurnContext(session_key="webhook:guest", channel="webhook", chat_id="guest", sender_id="g",
                       role="guest", chat_type="private", workspace=ws)


@pytest.mark.parametrize("path", INTERNAL)
async def test_internal_files_are_refused_to_the_owner_too(ws: Path, path: str) -> None:
    out = await call(make_ctx(ws), "read_file", path=path)
    assert out.startswith("Error: ") and "is internal gateway state" in out, out
    assert "4321" not in out
    written = await call(make_ctx(ws), "write_file", path=path, content="overwritten")
    assert written.startswith("Error: ")


async def test_grep_skips_internal_files_and_the_owner_still_reads_ordinary_ones(ws: Path) -> None:
    owner = make_ctx(ws)
    out = await call(owner, "grep", pattern="PIN")
    found = {line.split(":", 1)[0] for line in out.splitlines()}
    assert found == {"HEARTBEAT.md", "USER.md", "media/webhook/owner/scan.txt", "memory/2026-11-23.md",
                     "memory/MEMORY.md", "notes/shared.md"}
    assert "4321" in await call(owner, "read_file", path="USER.md")


@pytest.mark.parametrize("path", ["USER.md", "user.md", "memory/MEMORY.md", "memory/2026-11-23.md",
                                  "HEARTBEAT.md", "media/webhook/owner/scan.txt", "usage/2026-11.jsonl"])
async def test_a_guest_never_reads_the_owners_memory_or_other_chats_files(ws: Path, path: str) -> None:
    out = await call(guest(ws), "read_file", path=path)
    assert out.startswith("Error: ") and "4321" not in out and "PIN" not in out, out


async def test_a_guest_with_file_tools_sees_only_shared_and_own_files(ws: Path) -> None:
    g = guest(ws)
    assert "own upload" in await call(g, "read_file", path="media/webhook/guest/photo.txt")
    assert "public PIN policy" in await call(g, "read_file", path="notes/shared.md")
    out = await call(g, "grep", pattern="PIN")
    assert out.splitlines() == ["notes/shared.md:1: a public PIN policy"]
    listing = await call(g, "list_dir", path="memory")
    assert listing.startswith("Error: ") and "not available in this chat" in listing
