"""The web console over real HTTP: pages and headers, login and its refusals, CSRF/Origin,
memory edits committed to git with etags, the Dream log, chat over SSE, sessions, jobs,
usage, status and the OpenAPI contract."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lucidgate.gateway.cli import build_app
from lucidgate.memory.gitstore import GitStore
from tests.console_kit import (CONSOLE_TOKEN, MEMORY_MD, USER_MD, WEBHOOK_TOKEN, console_config,
                               running_console, seed_workspace, sse_events)
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls


@pytest.fixture
def config(make_config: Any, workspace: Path, fake_llm: FakeLLMServer) -> Any:
    seed_workspace(workspace)
    return console_config(make_config)


def _console_operations(app: Any) -> list[tuple[str, str]]:
    ops = []
    for path, item in app.openapi()["paths"].items():
        if path.startswith("/api/console/") and path != "/api/console/login":
            ops += [(method.upper(), path) for method in item]
    return ops


def _concrete(path: str) -> str:
    return (path.replace("{chat_id}", "tab-1").replace("{sha}", "abcdef12")
            .replace("{reminder_id}", "1"))


# ----------------------------------------------------------------------------- pages and headers


async def test_the_page_is_served_at_root_with_a_strict_policy(config: Any) -> None:
    async with running_console(config, login=False) as c:
        page = await c.client.get("/")
        old = await c.client.get("/console", follow_redirects=False)
        script = await c.client.get("/ui/app.js")
        missing = await c.client.get("/ui/../gateway/daemon/server.py")
        api = await c.client.get("/api/console/me")
        health = await c.client.get("/healthz")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    # No inline code at all: every script has a src, no style element or attribute, no CDN.
    html = page.text
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/ui/app.js">']
    assert "<style" not in html and "style=" not in html and "http" not in html
    assert old.status_code == 308 and old.headers["location"] == "/"
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "import" in script.text and "localStorage" not in script.text
    assert missing.status_code == 404
    assert api.status_code == 401 and api.headers["x-frame-options"] == "DENY"
    assert api.headers["cache-control"] == "no-store"
    assert "x-frame-options" not in health.headers  # other routes are left alone


async def test_no_script_keeps_a_token_in_storage_or_loads_from_elsewhere() -> None:
    static = Path(__file__).parents[1] / "gateway" / "console" / "static"
    for path in static.rglob("*.js"):
        text = path.read_text(encoding="utf-8")
        assert "localStorage" not in text, path
        assert "innerHTML" not in text and "outerHTML" not in text and "insertAdjacentHTML" not in text, path
        assert not re.search(r"""(?:from|import)\s*\(?\s*["']https?:""", text), path


# ----------------------------------------------------------------------------- login and refusals


async def test_every_console_endpoint_refuses_without_an_owner_session(config: Any) -> None:
    async with running_console(config, login=False) as c:
        ops = _console_operations(c.server.app)
        assert len(ops) >= 20
        for method, path in ops:
            url = _concrete(path)
            params = {"path": "USER.md", "key": "web:tab-1", "q": "x"}
            nothing = await c.client.request(method, url, params=params, headers=c.origin)
            bearer = await c.client.request(method, url, params=params,
                                            headers={**c.origin, "Authorization": f"Bearer {WEBHOOK_TOKEN}"})
            forged = await c.client.request(method, url, params=params,
                                            headers={**c.origin, "Cookie": "lucid_console=forged"})
            assert (nothing.status_code, bearer.status_code, forged.status_code) == (401, 401, 401), (method, path)


async def test_login_takes_only_the_console_token_and_sets_a_strict_cookie(config: Any) -> None:
    async with running_console(config, login=False) as c:
        webhook = await c.login(token=WEBHOOK_TOKEN)  # an integration token is not an owner credential
        wrong = await c.login(token="guess")
        no_origin = await c.client.post("/api/console/login", json={"token": CONSOLE_TOKEN})
        foreign = await c.client.post("/api/console/login", json={"token": CONSOLE_TOKEN},
                                      headers={"Origin": "http://evil.example"})
        ok = await c.login()
        me = await c.client.get("/api/console/me")
        logout_no_csrf = await c.client.post("/api/console/logout", headers=c.origin)
        logout = await c.client.post("/api/console/logout", headers=c.unsafe)
        after = await c.client.get("/api/console/me")
    assert webhook.status_code == 401 and wrong.status_code == 401
    assert no_origin.status_code == 403 and foreign.status_code == 403
    assert ok.status_code == 200
    cookie = ok.headers["set-cookie"]
    assert "lucid_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "Path=/" in cookie and "Secure" not in cookie  # plain http here; https adds Secure
    assert CONSOLE_TOKEN not in cookie and CONSOLE_TOKEN not in ok.text
    assert me.status_code == 200 and me.json()["csrf"] == ok.json()["csrf"]
    assert logout_no_csrf.status_code == 403 and logout.status_code == 204
    assert after.status_code == 401


async def test_a_guest_of_a_chat_channel_cannot_open_the_console(make_config: Any, workspace: Path,
                                                                 fake_llm: FakeLLMServer) -> None:
    # No console token configured: only a login link works, and a webhook guest has neither.
    config = make_config(channels={"webhook": {"token": WEBHOOK_TOKEN}}, gateway={"port": 0, "shutdownGraceS": 2})
    async with running_console(config, login=False) as c:
        empty = await c.login(token="")
        guessed = await c.login(token="anything")
        as_guest = await c.client.get("/api/console/memory/files",
                                      headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}", "X-Sender-Id": "guest"})
    assert empty.status_code == 401 and guessed.status_code == 401 and as_guest.status_code == 401


async def test_an_expired_session_is_refused(config: Any) -> None:
    async with running_console(config) as c:
        assert (await c.client.get("/api/console/memory/files")).status_code == 200
        base = c.ctx.auth.clock
        c.ctx.auth.clock = lambda: base() + c.ctx.auth.ttl_s + 1
        expired = await c.client.get("/api/console/memory/files")
        edit = await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                  json={"text": "x", "etag": "absent"}, headers=c.unsafe)
    assert expired.status_code == 401 and edit.status_code == 401
    assert (config.workspace / "USER.md").read_text() == USER_MD


async def test_one_time_login_link_from_the_cli_works_once(config: Any, tmp_path: Path) -> None:
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.model_dump(mode="json", by_alias=True) | {
        "console": {"token": CONSOLE_TOKEN}, "providers": {"openai": {"apiKey": "sk-test"}},
        "channels": {"webhook": {"token": WEBHOOK_TOKEN}}}))
    result = CliRunner().invoke(build_app(), ["console", "--config", str(path)])
    assert result.exit_code == 0, result.output
    match = re.search(r"http://\S+/#login=([A-Za-z0-9_-]+)", result.output)
    assert match, result.output
    async with running_console(config, login=False) as c:
        first = await c.login(code=match.group(1))
        me = await c.client.get("/api/console/me")
        c.client.cookies.clear()
        again = await c.login(code=match.group(1))
    assert first.status_code == 200 and me.status_code == 200
    assert again.status_code == 401


# ----------------------------------------------------------------------------- memory


async def test_editing_a_memory_file_commits_it_and_a_stale_etag_is_refused(config: Any) -> None:
    async with running_console(config) as c:
        files = (await c.client.get("/api/console/memory/files")).json()
        read = await c.client.get("/api/console/memory/file", params={"path": "USER.md"})
        doc = read.json()
        no_csrf = await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                     json={"text": "hijacked", "etag": doc["etag"]}, headers=c.origin)
        cross = await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                   json={"text": "hijacked", "etag": doc["etag"]},
                                   headers={"Origin": "http://evil.example", "X-CSRF-Token": c.csrf})
        text = USER_MD + "- Drinks 绿茶 every morning\n"
        saved = await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                   json={"text": text, "etag": doc["etag"]}, headers=c.unsafe)
        stale = await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                   json={"text": "an older edit", "etag": doc["etag"]}, headers=c.unsafe)
        outside = await c.client.put("/api/console/memory/file", params={"path": "../config.json"},
                                     json={"text": "{}", "etag": "absent"}, headers=c.unsafe)
        daily = await c.client.put("/api/console/memory/file", params={"path": "memory/2026-11-23.md"},
                                   json={"text": "# notes", "etag": "absent"}, headers=c.unsafe)
        found = (await c.client.get("/api/console/memory/search", params={"q": "绿茶"})).json()
    assert {f["path"] for f in files} >= {"SOUL.md", "USER.md", "memory/MEMORY.md"}
    assert read.headers["etag"] == f'"{doc["etag"]}"' and doc["text"] == USER_MD
    assert no_csrf.status_code == 403 and cross.status_code == 403
    assert saved.status_code == 200, saved.text
    assert stale.status_code == 409 and "changed" in stale.json()["detail"]
    assert outside.status_code == 400 and daily.status_code == 200 and daily.json()["commit"]
    ws = config.workspace
    assert (ws / "USER.md").read_text(encoding="utf-8") == text
    assert (ws / "memory" / "2026-11-23.md").read_text() == "# notes\n"
    note, head = GitStore(ws).log(2)
    assert note.sha == daily.json()["commit"] and note.message == "manual: memory/2026-11-23.md"
    assert head.sha == saved.json()["commit"] and head.message == "manual: USER.md" and head.files == ("USER.md",)
    assert [(h["path"], h["line"]) for h in found["hits"]] == [("USER.md", 5)]


# ----------------------------------------------------------------------------- Dream log


async def test_dream_log_shows_the_diff_and_restore_makes_a_new_commit(config: Any) -> None:
    ws = config.workspace
    async with running_console(config) as c:
        doc = (await c.client.get("/api/console/memory/file", params={"path": "USER.md"})).json()
        edited = USER_MD.replace("Lisbon", "Porto")
        saved = (await c.client.put("/api/console/memory/file", params={"path": "USER.md"},
                                    json={"text": edited, "etag": doc["etag"]}, headers=c.unsafe)).json()
        commits = (await c.client.get("/api/console/dream/commits")).json()
        detail = (await c.client.get(f"/api/console/dream/commits/{saved['commit'][:8]}")).json()
        unconfirmed = await c.client.post(f"/api/console/dream/commits/{saved['commit']}/restore",
                                          json={"confirm": False}, headers=c.unsafe)
        no_csrf = await c.client.post(f"/api/console/dream/commits/{saved['commit']}/restore",
                                      json={"confirm": True}, headers=c.origin)
        assert (ws / "USER.md").read_text() == edited
        restored = await c.client.post(f"/api/console/dream/commits/{saved['commit']}/restore",
                                       json={"confirm": True}, headers=c.unsafe)
        unknown = await c.client.get("/api/console/dream/commits/0123456789")
    assert commits[0]["sha"] == saved["commit"] and commits[0]["kind"] == "manual"
    assert commits[-1]["kind"] == "init"
    [file] = detail["diff"]
    assert file["path"] == "USER.md" and file["status"] == "modified"
    lines = [(line["op"], line["text"]) for hunk in file["hunks"] for line in hunk["lines"]]
    assert ("-", "- Lives in Lisbon") in lines and ("+", "- Lives in Porto") in lines
    assert unconfirmed.status_code == 400 and no_csrf.status_code == 403
    assert restored.status_code == 201, restored.text
    head = GitStore(ws).log(1)[0]
    assert head.sha == restored.json()["commit"] and head.message == f"restore: before {saved['commit'][:8]}"
    assert (ws / "USER.md").read_text() == USER_MD
    assert unknown.status_code == 404


async def test_run_dream_now_reports_progress_and_its_commit(config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(
        Reply("[MEMORY] Ana prefers green tea"),
        ToolCalls([("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Likes tea",
                                  "new_text": "- Likes green tea"})]),
        Reply("Done."),
    )
    async with running_console(config) as c:
        await c.parts.store.append_history("- Ana said she prefers green tea", session_key="web:tab-1")
        started = await c.client.post("/api/console/dream/run", headers=c.unsafe)
        assert started.status_code == 202 and started.json()["running"] is True
        again = await c.client.post("/api/console/dream/run", headers=c.unsafe)
        state = started.json()
        while state["running"]:
            await asyncio.sleep(0.05)  # polling the endpoint the page polls; the loop ends on a condition
            state = (await c.client.get("/api/console/dream/run")).json()
        detail = (await c.client.get(f"/api/console/dream/commits/{state['commit']}")).json()
        history = (await c.client.get("/api/console/history")).json()
    assert again.status_code == 409
    assert state["error"] is None and state["commit"], state
    assert "1 change(s)" in state["summary"] and state["progress"][-1] == "finished"
    assert any("1 history entries waiting" in line for line in state["progress"])
    assert any(line.startswith("memory commit") for line in state["progress"])
    assert detail["kind"] == "dream"
    lines = [(line["op"], line["text"]) for f in detail["diff"] for h in f["hunks"] for line in h["lines"]]
    assert ("+", "- Likes green tea") in lines
    assert (config.workspace / "memory" / "MEMORY.md").read_text() == MEMORY_MD.replace("tea", "green tea")
    assert history["dream_cursor"] == 1 and history["entries"][0]["processed"] is True


# ----------------------------------------------------------------------------- chat


async def test_chat_streams_the_reply_with_tool_calls_and_resumes_without_loss(
        config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(ToolCalls([("read_file", {"path": "USER.md"})]), Reply("你好, Ana! Lisbon it is."))
    async with running_console(config) as c:
        url = "/api/console/chats/tab-1/events"
        listen = asyncio.create_task(sse_events(c.client, url, 2))
        posted = await c.client.post("/api/console/chats/tab-1/messages", json={"text": "where do I live?"},
                                     headers=c.unsafe)
        user, reply = await listen
        resumed = await sse_events(c.client, f"{url}?after=1", 1)
        by_header = asyncio.create_task(sse_events(c.client, url, 1, headers={"Last-Event-ID": "2"}))
        fake_llm.queue(Reply("second answer"))
        await c.client.post("/api/console/chats/tab-1/messages", json={"text": "again"}, headers=c.unsafe)
        [next_event] = await by_header
        bad = await c.client.post("/api/console/chats/..%2Fx/messages", json={"text": "x"}, headers=c.unsafe)
        no_csrf = await c.client.post("/api/console/chats/tab-1/messages", json={"text": "x"}, headers=c.origin)
        chats = (await c.client.get("/api/console/chats")).json()
        transcript = (await c.client.get("/api/console/sessions/transcript", params={"key": "web:tab-1"})).json()
    assert posted.status_code == 202 and posted.json()["id"] == 1
    assert (user["type"], user["text"], user["id"]) == ("user", "where do I live?", 1)
    assert (reply["type"], reply["text"], reply["id"]) == ("reply", "你好, Ana! Lisbon it is.", 2)
    assert [t["name"] for t in reply["tools"]] == ["read_file"] and "Lisbon" in reply["tools"][0]["result"]
    assert [e["id"] for e in resumed] == [2]
    assert next_event["id"] == 3 and next_event["text"] == "again"  # nothing from before, nothing twice
    assert bad.status_code in (400, 404) and no_csrf.status_code == 403
    assert {"chat_id": "tab-1", "session_key": "web:tab-1"} in chats
    roles = [m["role"] for m in transcript["messages"]]
    assert roles[:4] == ["user", "assistant", "tool", "assistant"]
    assert transcript["messages"][1]["tool_calls"][0]["name"] == "read_file"
    # The console user is the owner in a private chat.
    assert "web:tab-1" in c.parts.owner_sessions


async def test_slash_commands_and_new_from_the_sessions_view(config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("noted"))
    async with running_console(config) as c:
        listen = asyncio.create_task(sse_events(c.client, "/api/console/chats/tab-2/events", 2))
        await c.client.post("/api/console/chats/tab-2/messages", json={"text": "remember this"}, headers=c.unsafe)
        events = await listen
        listen = asyncio.create_task(sse_events(c.client, "/api/console/chats/tab-2/events?after=2", 2))
        await c.client.post("/api/console/chats/tab-2/messages", json={"text": "/help"}, headers=c.unsafe)
        events += await listen
        sessions = (await c.client.get("/api/console/sessions")).json()
        listen = asyncio.create_task(sse_events(c.client, "/api/console/chats/tab-2/events?after=4", 2))
        new = await c.client.post("/api/console/sessions/new", params={"key": "web:tab-2"}, headers=c.unsafe)
        slash_new, confirmation = await listen
        missing = await c.client.post("/api/console/sessions/new", params={"key": "web:nope"}, headers=c.unsafe)
        commands = (await c.client.get("/api/console/commands")).json()
    assert [e["type"] for e in events] == ["user", "reply", "user", "reply"]
    assert "/new" in events[3]["text"]
    [row] = [s for s in sessions if s["key"] == "web:tab-2"]
    assert row["channel"] == "web" and row["chat_id"] == "tab-2" and row["messages"] == 2 and row["tokens"] > 0
    assert new.status_code == 202 and slash_new["text"] == "/new"
    assert "fresh conversation" in confirmation["text"]
    assert missing.status_code == 404
    assert {"new", "help", "dream"} <= {cmd["name"] for cmd in commands}


# ----------------------------------------------------------------------------- history, jobs, usage, status


async def test_history_timeline_marks_the_dream_cursor_and_filters(config: Any) -> None:
    async with running_console(config) as c:
        store = c.parts.store
        for text, key in [("one", "web:a"), ("two", "telegram:9"), ("three", "web:a")]:
            await store.append_history(text, session_key=key)
        await store.set_dream_cursor(1)
        archive = config.workspace / "memory" / "archive"
        archive.mkdir()
        (archive / "2026-01.jsonl").write_text('{"cursor": 0, "timestamp": "2026-01-02 10:00", '
                                               '"content": "archived", "session_key": "cli:direct"}\n')
        everything = (await c.client.get("/api/console/history")).json()
        web = (await c.client.get("/api/console/history", params={"channel": "web"})).json()
        one = (await c.client.get("/api/console/history", params={"session": "telegram:9"})).json()
    assert [e["content"] for e in everything["entries"]] == ["three", "two", "one", "archived"]
    assert [e["processed"] for e in everything["entries"]] == [False, False, True, True]
    assert everything["dream_cursor"] == 1 and everything["unprocessed"] == 2
    assert everything["entries"][-1]["archived"] is True
    assert set(everything["sessions"]) == {"web:a", "telegram:9", "cli:direct"}
    assert [e["content"] for e in web["entries"]] == ["three", "one"]
    assert [e["content"] for e in one["entries"]] == ["two"]


async def test_jobs_list_a_reminder_and_cancel_it(config: Any) -> None:
    from lucidgate.channels.messages import Target

    async with running_console(config) as c:
        sched = c.parts.scheduler
        assert sched is not None
        reminder, _ = await sched.add_reminder(session_key="web:tab-1", target=Target("web", "tab-1"),
                                               text="water the plants", every=3600)
        jobs = (await c.client.get("/api/console/jobs")).json()
        no_csrf = await c.client.delete(f"/api/console/jobs/reminders/{reminder.id}", headers=c.origin)
        cancelled = await c.client.delete(f"/api/console/jobs/reminders/{reminder.id}", headers=c.unsafe)
        twice = await c.client.delete(f"/api/console/jobs/reminders/{reminder.id}", headers=c.unsafe)
        after = (await c.client.get("/api/console/jobs")).json()
    [listed] = jobs["reminders"]
    assert listed["id"] == reminder.id and listed["text"] == "water the plants" and listed["next_run"]
    assert {j["name"] for j in jobs["jobs"]} == {"dream", "heartbeat"}
    assert next(j for j in jobs["jobs"] if j["name"] == "dream")["next_run"]
    assert no_csrf.status_code == 403 and cancelled.status_code == 204 and twice.status_code == 404
    assert after["reminders"] == []


async def test_usage_per_day_and_job_with_budgets(make_config: Any, workspace: Path, fake_llm: FakeLLMServer) -> None:
    import json
    from datetime import UTC, datetime

    seed_workspace(workspace)
    config = console_config(make_config, usage={"dailyTokenBudget": 5000})
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    (workspace / "usage").mkdir()
    (workspace / "usage" / f"{today}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [
        {"ts": today, "job": "turn", "session": "web:a", "model": "m", "prompt": 100, "completion": 20},
        {"ts": today, "job": "dream", "session": None, "model": "m", "prompt": 300, "completion": 30},
        {"ts": today, "job": "turn", "session": "web:a", "model": "m", "prompt": 1, "completion": 1},
    ]) + "not json\n")
    async with running_console(config) as c:
        usage = (await c.client.get("/api/console/usage", params={"days": 3})).json()
    assert [d["day"] for d in usage["days"]][-1] == today and len(usage["days"]) == 3
    assert usage["days"][-1]["by_job"] == {"turn": 122, "dream": 330} and usage["days"][-1]["total"] == 452
    assert usage["by_job"] == {"turn": 122, "dream": 330}
    assert usage["daily_budget"] == 5000 and usage["dream_budget"] == 200_000


async def test_status_names_failed_channels_with_their_reason(config: Any) -> None:
    from lucidgate.channels.messages import OutboundMessage
    from lucidgate.gateway.app import build_gateway
    from lucidgate.gateway.daemon.server import create_app

    class Broken:
        name = "broken"

        async def start(self) -> None:
            raise RuntimeError("token rejected by the platform")

        async def stop(self) -> None:
            return None

        async def send(self, msg: OutboundMessage) -> None:
            return None

    gateway = build_gateway(config, "daemon")
    gateway.add_channel("broken", Broken())
    app = create_app(config, gateway=gateway)
    async with running_console(config, app=app) as c:
        status = (await c.client.get("/api/console/status")).json()
    channels = {ch["name"]: ch for ch in status["channels"]}
    assert channels["broken"]["up"] is False and "token rejected" in channels["broken"]["reason"]
    assert channels["web"]["up"] is True
    assert status["model"] == "openai/fake-model" and status["model_ready"] is True
    assert status["version"] and status["uptime_s"] >= 0


async def test_every_console_endpoint_is_in_the_schema_under_the_console_tag(config: Any) -> None:
    from lucidgate.gateway.daemon.server import create_app

    schema = create_app(config).openapi()
    console_paths = {p: item for p, item in schema["paths"].items()
                     if p.startswith("/api/console/") or p in ("/", "/console")}
    assert len(console_paths) >= 20
    for path, item in console_paths.items():
        for method, op in item.items():
            assert op["tags"] == ["console"], (method, path)
            if path.startswith("/api/console/") and path != "/api/console/login":
                assert "401" in op["responses"], (method, path)


async def test_the_cookie_is_secure_when_served_over_tls(config: Any) -> None:
    import httpx

    from lucidgate.gateway.daemon.server import create_app

    # Behind TLS (here: an https scope straight into the app) the session cookie is Secure.
    app = create_app(config)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://console.example") as client:
        response = await client.post("/api/console/login", json={"token": CONSOLE_TOKEN},
                                     headers={"Origin": "https://console.example"})
    assert response.status_code == 200
    assert "Secure" in response.headers["set-cookie"] and "HttpOnly" in response.headers["set-cookie"]


async def test_lucid_gateway_prints_a_login_link_only_in_a_terminal(config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from lucidgate.gateway.cli.webconsole import announcement

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    plain = announcement(config, "http://127.0.0.1:1")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    line = announcement(config, "http://127.0.0.1:1")
    assert plain == "web console: http://127.0.0.1:1/ (log in with `lucid console` or console.token)"
    match = re.search(r"/#login=([A-Za-z0-9_-]+) ", line)
    assert match
    async with running_console(config, login=False) as c:
        assert (await c.login(code=match.group(1))).status_code == 200


async def test_a_chat_resumes_after_a_gateway_restart_with_the_same_ids(config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("first answer"), Reply("second answer"))
    async with running_console(config) as c:
        listen = asyncio.create_task(sse_events(c.client, "/api/console/chats/tab-9/events", 2))
        await c.client.post("/api/console/chats/tab-9/messages", json={"text": "one"}, headers=c.unsafe)
        before = await listen
    async with running_console(config) as c:  # a new process would read the same files
        replay = await sse_events(c.client, "/api/console/chats/tab-9/events", 2)
        listen = asyncio.create_task(sse_events(c.client, "/api/console/chats/tab-9/events?after=2", 2))
        posted = await c.client.post("/api/console/chats/tab-9/messages", json={"text": "two"}, headers=c.unsafe)
        after = await listen
    assert [(e["id"], e["text"]) for e in before] == [(1, "one"), (2, "first answer")]
    assert replay == before
    assert posted.json()["id"] == 3
    assert [(e["id"], e["text"]) for e in after] == [(3, "two"), (4, "second answer")]
