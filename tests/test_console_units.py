"""A console route module is a unit: its ``router(auth, …)`` takes the owner check and only the
parts its routes use. Here the memory routes run alone — a real workspace and git store, no
gateway — served over loopback HTTP."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from lucidgate.config.onboard import install_templates
from lucidgate.gateway.console import api_auth, api_memory
from lucidgate.gateway.console.auth import ConsoleAuth
from lucidgate.gateway.console.links import LoginLinks
from lucidgate.memory.gitstore import GitStore
from tests.served import served_client

TOKEN = "console-unit-token-0123456789abcdef"


async def test_the_memory_routes_run_with_only_a_workspace_and_its_git_store(workspace: Path) -> None:
    install_templates(workspace)
    git = GitStore(workspace)
    git.init()
    auth = ConsoleAuth(token=TOKEN, links=LoginLinks(workspace), ttl_s=600)
    app = FastAPI()
    app.include_router(api_auth.router(auth))
    app.include_router(api_memory.router(auth, workspace=workspace, git=git, recall=None))

    async with served_client(app) as client:
        origin = {"Origin": str(client.base_url).rstrip("/")}
        assert (await client.get("/api/console/memory/file", params={"path": "USER.md"})).status_code == 401
        login = await client.post("/api/console/login", json={"token": TOKEN}, headers=origin)
        assert login.status_code == 200, login.text
        unsafe = {**origin, "X-CSRF-Token": login.json()["csrf"]}

        read = await client.get("/api/console/memory/file", params={"path": "USER.md"})
        assert read.status_code == 200 and read.json()["exists"]
        saved = await client.put("/api/console/memory/file", params={"path": "USER.md"}, headers=unsafe,
                                 json={"text": "# User\nName: Ana", "etag": read.json()["etag"]})
        assert saved.status_code == 200, saved.text
        assert (workspace / "USER.md").read_text() == "# User\nName: Ana\n"
        latest = git.log(1)[0]
        assert saved.json()["commit"].startswith(latest.short) and latest.message.startswith("manual:")

        found = await client.get("/api/console/memory/search", params={"q": "Ana"})
        assert found.json()["engine"] == "grep"  # no recall index handed in: the route greps
        assert [h["path"] for h in found.json()["hits"]] == ["USER.md"]
