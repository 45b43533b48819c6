"""The console with several agents (issue 41), over real HTTP: every console API answers for the
agent named by ``?agent=`` (absent: the default agent) and only from that agent's parts.

"home" (the default) is told a fact in its MEMORY.md and another in a console chat; every API
asked for "work" — sessions, transcripts, memory files, search, open, history, the Dream log
and its diffs, forget, approvals, chats and their streams, jobs, usage — is checked to return
neither, and home's keys, paths and commits asked under work are refused. The same calls for
home find both facts (so the checks would notice a leak). The console's chat to work reaches
work (its turn, its transcript, its log in its own workspace), and /metrics counts each agent's
turn under its own ``agent`` label.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lucidgate.config.schema import Config
from lucidgate.gateway.runtime import GatewayParts
from tests.console_kit import Console, console_config, running_console, sse_events
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls, message_text
from tests.waiting import until_async

HOME_FACT = "The vault code is 7319."
SECRET = "7319"
LOCKER = "8842"
WORK_FACT = "The quarterly review is on Thursday."
REPLY_TIMEOUT = 60.0


def agents_config(make_config: Callable[..., Config], root: Path, **sections: Any) -> Config:
    home, work = root / "home", root / "work"
    for ws, fact in ((home, HOME_FACT), (work, WORK_FACT)):
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / "MEMORY.md").write_text(f"# Memory\n\n- {fact}\n")
    return console_config(make_config, agents={
        "defaults": {"llmRetries": 0, "dream": {"enabled": False},
                     "memory": {"search": {"embedding": {"model": "none"}, "watch": False}}},
        "list": [{"id": "home", "workspace": str(home)}, {"id": "work", "workspace": str(work)}]}, **sections)


@pytest.fixture
def config(make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> Config:
    return agents_config(make_config, tmp_path)


def agents_of(c: Console) -> dict[str, GatewayParts]:
    return dict(c.server.app.state.lucid.gateway.agents)


async def chat(c: Console, chat_id: str, text: str, agent: str | None = None) -> dict[str, Any]:
    """Post ``text`` to a console chat and return the reply event."""
    params = {"agent": agent} if agent else {}
    after = max([0] + [e["id"] for e in await events_now(c, chat_id, agent)])
    listen = asyncio.create_task(sse_events(c.client, f"/api/console/chats/{chat_id}/events?after={after}"
                                            + (f"&agent={agent}" if agent else ""), 2))
    posted = await c.client.post(f"/api/console/chats/{chat_id}/messages", params=params,
                                 json={"text": text}, headers=c.unsafe)
    assert posted.status_code == 202, posted.text
    _user, reply = await asyncio.wait_for(listen, REPLY_TIMEOUT)
    return reply


async def events_now(c: Console, chat_id: str, agent: str | None) -> list[dict[str, Any]]:
    """The chat's stored events (its log), read without waiting for new ones."""
    parts = agents_of(c)
    web = c.ctx.web
    assert web is not None
    stamp = "" if agent in (None, "home") else agent
    assert stamp == "" or stamp in parts
    log = web._log(stamp)  # noqa: SLF001 - the test reads the channel's own record
    await log.load(chat_id)
    return [e.as_json() for e in log.after(chat_id, 0)]


def leaks(body: object) -> bool:
    text = str(body)
    return SECRET in text or LOCKER in text


async def test_every_console_api_asked_for_work_returns_nothing_of_home(
        config: Config, tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    home_ws, work_ws = tmp_path / "home", tmp_path / "work"
    async with running_console(config) as c:
        get, work = c.client.get, {"agent": "work"}
        # Home hears a fact in chat and its owner edits its memory in the console (a commit).
        fake_llm.queue(Reply("noted the locker"))
        assert (await chat(c, "h1", f"remember: my locker number is {LOCKER}"))["text"] == "noted the locker"
        memory = (await get("/api/console/memory/file", params={"path": "memory/MEMORY.md"})).json()
        saved = await c.client.put("/api/console/memory/file", params={"path": "memory/MEMORY.md"}, headers=c.unsafe,
                                   json={"text": memory["text"] + f"- Locker {LOCKER}.\n", "etag": memory["etag"]})
        assert saved.status_code == 200, saved.text
        home_commit = saved.json()["commit"]
        parts = agents_of(c)
        await parts["home"].store.append_history(f"- {HOME_FACT}", session_key="web:h1", owner=True)
        await parts["work"].store.append_history(f"- {WORK_FACT}", session_key="work:web:work.w1", owner=True)
        # Work hears something in its own console chat: the turn is work's.
        fake_llm.queue(Reply("work noted"))
        assert (await chat(c, "w1", "hello work", agent="work"))["text"] == "work noted"
        work_request = fake_llm.requests[-1]

        # Positive controls: asked for home (explicitly or by default), the facts are found.
        for params in ({}, {"agent": "home"}):
            await until_async(lambda p=params: _found(get, SECRET, p), REPLY_TIMEOUT, what="home's search")
        assert SECRET in (await get("/api/console/memory/file", params={"path": "memory/MEMORY.md"})).text
        assert "web:h1" in [s["key"] for s in (await get("/api/console/sessions")).json()]
        assert leaks((await get("/api/console/history")).json())
        assert LOCKER in (await get(f"/api/console/dream/commits/{home_commit}")).text

        # Asked for work: nothing of home's, anywhere.
        answers = {
            "sessions": await get("/api/console/sessions", params=work),
            "files": await get("/api/console/memory/files", params=work),
            "memory": await get("/api/console/memory/file", params={**work, "path": "memory/MEMORY.md"}),
            "user": await get("/api/console/memory/file", params={**work, "path": "USER.md"}),
            "search secret": await get("/api/console/memory/search", params={**work, "q": SECRET}),
            "search locker": await get("/api/console/memory/search", params={**work, "q": LOCKER}),
            "search words": await get("/api/console/memory/search", params={**work, "q": "vault code"}),
            "history": await get("/api/console/history", params=work),
            "commits": await get("/api/console/dream/commits", params=work),
            "dream run": await get("/api/console/dream/run", params=work),
            "forgotten": await get("/api/console/forgotten", params=work),
            "approvals": await get("/api/console/approvals", params=work),
            "chats": await get("/api/console/chats", params=work),
            "jobs": await get("/api/console/jobs", params=work),
            "usage": await get("/api/console/usage", params=work),
            "status": await get("/api/console/status", params=work),
            "commands": await get("/api/console/commands", params=work),
        }
        for name, answer in answers.items():
            assert answer.status_code == 200, (name, answer.text)
            body = answer.json()
            shown = {k: v for k, v in body.items() if k != "query"} if isinstance(body, dict) else body
            assert not leaks(shown), (name, answer.text)  # (a search echoes its query)
        assert WORK_FACT in answers["memory"].json()["text"]
        assert [s["key"] for s in answers["sessions"].json()] == ["work:web:work.w1"]
        assert answers["sessions"].json()[0]["channel"] == "web"
        assert [c_["chat_id"] for c_ in answers["chats"].json()] == ["w1"]
        assert answers["search secret"].json()["hits"] == [] and answers["search locker"].json()["hits"] == []
        assert answers["history"].json()["sessions"] == ["work:web:work.w1"]
        assert answers["history"].json()["entries"][0]["channel"] == "web"

        # (Opening a chat makes it known.) The same chat id under home is another chat: nothing of work's in it, and the reverse.
        assert await events_now(c, "w1", None) == []
        assert await events_now(c, "h1", "work") == []

        # Home's session keys, paths and commits asked under work: not found, or refused.
        refused = [
            await get("/api/console/sessions/transcript", params={**work, "key": "web:h1"}),
            await get("/api/console/sessions/transcript", params={**work, "key": "../../home/sessions/web_h1"}),
            await get("/api/console/sessions/transcript", params={**work, "key": str(home_ws / "sessions" / "web_h1")}),
            await get("/api/console/memory/file", params={**work, "path": "../home/memory/MEMORY.md"}),
            await get("/api/console/memory/file", params={**work, "path": str(home_ws / "memory" / "MEMORY.md")}),
            await get("/api/console/memory/open", params={**work, "path": str(home_ws / "memory" / "MEMORY.md")}),
            await get("/api/console/memory/open", params={**work, "path": "../home/memory/MEMORY.md"}),
            await get("/api/console/memory/open", params={**work, "path": "sessions/web_h1.jsonl"}),
            await get(f"/api/console/dream/commits/{home_commit}", params=work),
            await c.client.post("/api/console/sessions/new", params={**work, "key": "web:h1"}, headers=c.unsafe),
            await c.client.post(f"/api/console/dream/commits/{home_commit}/restore", params=work,
                                json={"confirm": True}, headers=c.unsafe),
        ]
        for answer in refused:
            assert answer.status_code in (400, 404), (answer.request.url, answer.status_code, answer.text)
            assert not leaks(answer.json()["detail"]), answer.text
        # Work's own key asked without an agent (the default, home): not there either.
        assert (await get("/api/console/sessions/transcript", params={"key": "work:web:work.w1"})).status_code == 404

        # Forget in work reaches work's memory only: nothing of home's is found or touched.
        forgot = await c.client.post("/api/console/forget", params=work, headers=c.unsafe,
                                     json={"text": f"locker number is {LOCKER}", "confirm": True})
        assert forgot.status_code == 200, forgot.text
        assert forgot.json()["files"] == {} and forgot.json()["history_lines"] == 0
        assert forgot.json()["sessions"] == 0 and forgot.json()["index_chunks"] == 0

        # An unknown agent is a clear 404 on every kind of route.
        for path in ("/api/console/sessions", "/api/console/memory/files", "/api/console/history",
                     "/api/console/dream/commits", "/api/console/status", "/api/console/chats"):
            unknown = await get(path, params={"agent": "nobody"})
            assert unknown.status_code == 404 and "no agent 'nobody'" in unknown.json()["detail"], unknown.text
        listed = (await get("/api/console/agents")).json()

    assert [(a["id"], a["default"]) for a in listed] == [("home", True), ("work", False)]
    assert (home_ws / "memory" / "MEMORY.md").read_text().count(LOCKER) == 1  # home untouched by work's forget
    # Work's console turn was work's: its memory in the prompt, never home's; its log in its workspace.
    assert WORK_FACT in _text(work_request) and not leaks(_text(work_request))
    assert (work_ws / "state" / "web" / "w1.jsonl").exists() and not (home_ws / "state" / "web" / "w1.jsonl").exists()
    assert not (work_ws / "state" / "web" / "h1.jsonl").exists()


async def test_the_console_chat_to_work_is_works_and_metrics_count_each_agent(
        config: Config, tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    async with running_console(config) as c:
        fake_llm.queue(Reply("home here"), Reply("work here"))
        assert (await chat(c, "t1", "hi home"))["text"] == "home here"
        assert (await chat(c, "t1", "hi work", agent="work"))["text"] == "work here"
        parts = agents_of(c)
        for p in parts.values():
            await p.agent.idle()
        work_transcript = (await c.client.get("/api/console/sessions/transcript",
                                              params={"agent": "work", "key": "work:web:work.t1"})).json()
        metrics = (await c.client.get("/metrics")).text
    assert [m["content"] for m in work_transcript["messages"]] == ["hi work", "work here"]
    assert work_transcript["messages"][0]["sender_id"] == "console"
    # The console's login owns every agent: work's turn ran as its owner's.
    assert "work:web:work.t1" in parts["work"].owner_sessions
    for agent in ("home", "work"):
        assert f'lucid_messages_in_total{{agent="{agent}",channel="web"}} 1.0' in metrics, metrics
        assert f'lucid_messages_out_total{{agent="{agent}",channel="web"}} 1.0' in metrics
        assert f'lucid_llm_calls_total{{agent="{agent}",job="turn",status="ok"}} 1.0' in metrics
        assert f'lucid_turn_seconds_count{{agent="{agent}"}} 1.0' in metrics
        assert f'lucid_active_turns{{agent="{agent}"}} 0.0' in metrics
        assert f'lucid_inbound_queue_depth{{agent="{agent}"}} 0.0' in metrics
        assert f'lucid_llm_tokens_total{{agent="{agent}",job="turn",kind="prompt"}}' in metrics
    assert "lucid_delivery_lanes " in metrics  # the daemon's, unlabelled


async def test_with_one_agent_the_console_and_metrics_are_as_before(
        make_config: Callable[..., Config], fake_llm: FakeLLMServer) -> None:
    config = console_config(make_config)
    async with running_console(config) as c:
        fake_llm.queue(Reply("hi"))
        assert (await chat(c, "s1", "hello"))["text"] == "hi"
        await c.parts.agent.idle()
        listed = (await c.client.get("/api/console/agents")).json()
        by_id = await c.client.get("/api/console/sessions", params={"agent": "default"})
        other = await c.client.get("/api/console/sessions", params={"agent": "work"})
        metrics = (await c.client.get("/metrics")).text
    assert [(a["id"], a["default"]) for a in listed] == [("default", True)]
    assert [s["key"] for s in by_id.json()] == ["web:s1"]
    assert other.status_code == 404
    assert 'lucid_messages_in_total{channel="web"} 1.0' in metrics and 'agent="' not in metrics


async def _found(get: Callable[..., Any], query: str, params: dict[str, str]) -> bool:
    answer: httpx.Response = await get("/api/console/memory/search", params={**params, "q": query})
    return any(query in h["text"] for h in answer.json()["hits"])


def _text(request: dict[str, Any]) -> str:
    return "\n".join(message_text(m) for m in request["messages"])


async def test_an_action_held_in_home_is_unknown_to_work(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    config = agents_config(make_config, tmp_path, tools={"approvals": "always"})
    fake_llm.queue(ToolCalls([("write_file", {"path": "USER.md", "content": "home's owner\n"})]), Reply("asked"))
    async with running_console(config) as c:
        posted = await c.client.post("/api/console/chats/h1/messages", json={"text": "write it"}, headers=c.unsafe)
        assert posted.status_code == 202, posted.text

        async def held() -> bool:
            listed = (await c.client.get("/api/console/approvals")).json()["approvals"]
            return any(a["status"] == "pending" for a in listed)

        await until_async(held, REPLY_TIMEOUT, what="home's held action")
        (request,) = (await c.client.get("/api/console/approvals")).json()["approvals"]
        in_work = (await c.client.get("/api/console/approvals", params={"agent": "work"})).json()["approvals"]
        approve = await c.client.post(f"/api/console/approvals/{request['id']}/approve", params={"agent": "work"},
                                      headers=c.unsafe)
        deny = await c.client.post(f"/api/console/approvals/{request['id']}/deny", params={"agent": "work"},
                                   headers=c.unsafe)
        still = (await c.client.get("/api/console/approvals", params={"agent": "home"})).json()["approvals"]
        ok = await c.client.post(f"/api/console/approvals/{request['id']}/approve", params={"agent": "home"},
                                 headers=c.unsafe)
        await agents_of(c)["home"].agent.idle()
    assert request["tool"] == "write_file" and in_work == []
    assert approve.status_code == 404 and deny.status_code == 404
    assert [a["status"] for a in still] == ["pending"]
    assert ok.status_code == 200, ok.text
    assert (tmp_path / "home" / "USER.md").read_text() == "home's owner\n"
    assert "home's owner" not in (tmp_path / "work" / "USER.md").read_text()


async def test_a_binding_on_the_web_channel_does_not_move_the_console_chat_of_the_agent_picked(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    """The console's chat names its agent, the default one included: a binding that sends
    the "web" channel to work changes nothing for a chat picked for home."""
    config = agents_config(make_config, tmp_path, bindings=[{"agent": "work", "match": {"channel": "web"}}])
    fake_llm.queue(Reply("home here"), Reply("work here"))
    async with running_console(config) as c:
        assert (await chat(c, "b1", "to home"))["text"] == "home here"
        home_request = fake_llm.requests[-1]
        assert (await chat(c, "b1", "to work", agent="work"))["text"] == "work here"
        for p in agents_of(c).values():
            await p.agent.idle()
        home_keys = [s["key"] for s in (await c.client.get("/api/console/sessions")).json()]
        work_keys = [s["key"] for s in (await c.client.get("/api/console/sessions", params={"agent": "work"})).json()]
    assert home_keys == ["web:b1"] and work_keys == ["work:web:work.b1"]
    assert SECRET in _text(home_request) and WORK_FACT not in _text(home_request)
