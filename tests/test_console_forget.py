"""Forget from the web console over real HTTP: the report, the views that no longer show the
text (transcript, Dream log diff), the list with un-forget, the guard, and the purge."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lucidgate.memory.gitsafe import run_git
from tests.console_kit import USER_MD, console_config, running_console, seed_workspace, sse_events
from tests.fakes.llm import FakeLLMServer, Reply


@pytest.fixture
def config(make_config: Any, workspace: Path, fake_llm: FakeLLMServer) -> Any:
    seed_workspace(workspace)
    return console_config(make_config)


async def test_forget_in_the_console_reaches_its_views_and_purges(config: Any, fake_llm: FakeLLMServer) -> None:
    ws = config.workspace
    fake_llm.queue(Reply("Noted: Luna."))
    async with running_console(config) as c:
        doc = (await c.client.get("/api/console/memory/file", params={"path": "USER.md"})).json()
        edited = USER_MD + "- my cat is named Luna\n" + "".join(f"- fact {i}\n" for i in range(8))
        saved = (await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                    json={"text": edited, "etag": doc["etag"]}, headers=c.unsafe)).json()
        listen = asyncio.create_task(sse_events(c.client, "/api/console/chats/tab-1/events", 2))
        await c.client.post("/api/console/chats/tab-1/messages", json={"text": "my cat is Luna"}, headers=c.unsafe)
        await listen
        short = await c.client.post("/api/console/forget", json={"text": "a"}, headers=c.unsafe)
        done = await c.client.post("/api/console/forget", json={"text": "luna"}, headers=c.unsafe)
        transcript = (await c.client.get("/api/console/sessions/transcript", params={"key": "web:tab-1"})).json()
        detail = (await c.client.get(f"/api/console/dream/commits/{saved['commit'][:8]}")).json()
        listed = (await c.client.get("/api/console/forgotten")).json()
        purged = await c.client.post("/api/console/forget", json={"text": "luna", "purge": True}, headers=c.unsafe)
        unforgot = await c.client.delete(f"/api/console/forgotten/{listed[0]['id']}", headers=c.unsafe)
        after = (await c.client.get("/api/console/forgotten")).json()
    assert short.status_code == 409 and "shorter than 4 characters" in short.json()["detail"]
    assert done.status_code == 200, done.text
    result = done.json()
    assert result["files"] == {"USER.md": 1} and result["sessions"] == 1 and not result["purged"]
    assert "history of changes (git) still holds" in result["report"]
    assert "luna" not in json.dumps(transcript).lower() and "[forgotten]" in json.dumps(transcript)
    assert "luna" not in json.dumps(detail).lower()  # an older commit's diff, redacted
    assert [item["by"] for item in listed] == ["the owner in the console"]
    assert "luna" not in json.dumps(listed).lower() and listed[0]["shown"] == "(hashed, 4 characters)"
    assert purged.status_code == 200 and purged.json()["purged"], purged.text
    history = run_git(["log", "--all", "-p"], cwd=ws, workspace=ws).stdout
    assert "luna" not in history.lower()
    assert unforgot.status_code == 200 and after == []
