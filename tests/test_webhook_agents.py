"""The webhook's sessions API with several agents (issue 41), over real HTTP: a reply's
``session`` is the key the message really landed in (``work:webhook:w1`` for a chat bound to
"work"), the sessions API lists and reads each agent's own sessions (``?agent=``, or the agent
a key starts with), resets them in that agent, and refuses one agent's key under another.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lucidgate.config.schema import Config
from lucidgate.gateway.daemon.serve import GatewayServer
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.sessions import load_session_file
from tests.fakes.llm import FakeLLMServer, Reply

TOKEN = "wh-agents-token-0123456789abcdef"
HOME_FACT = "The vault code is 7319."
SECRET = "7319"


def config_for(make_config: Callable[..., Config], root: Path) -> Config:
    home, work = root / "home", root / "work"
    for ws in (home, work):
        (ws / "memory").mkdir(parents=True)
    (home / "memory" / "MEMORY.md").write_text(f"# Memory\n\n- {HOME_FACT}\n")
    return make_config(
        agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False},
                             "memory": {"search": {"embedding": {"model": "none"}, "watch": False}}},
                "list": [{"id": "home", "workspace": str(home)}, {"id": "work", "workspace": str(work)}]},
        bindings=[{"agent": "work", "match": {"channel": "webhook", "chat": "w1"}}],
        channels={"webhook": {"token": TOKEN, "waitTimeoutS": 60, "rateLimitPerMin": 1000}},
        gateway={"port": 0, "shutdownGraceS": 2})


def lines(workspace: Path, key: str) -> list[dict[str, Any]]:
    return load_session_file(workspace / "sessions" / f"{session_file_stem(key)}.jsonl").messages


async def test_each_agents_webhook_sessions_are_its_own_and_the_reply_names_the_real_session(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    fake_llm.queue(Reply("work says hi"), Reply("home says hi"), Reply("work again"))
    async with GatewayServer(config_for(make_config, tmp_path), access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                     headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            to_work = await client.post("/v1/messages", json={"chat_id": "w1", "sender_id": "u1", "text": "hi w"})
            to_home = await client.post("/v1/messages", json={"chat_id": "w2", "sender_id": "u1", "text": "hi h"})
            queued = await client.post("/v1/messages", json={"chat_id": "w1", "sender_id": "u1", "text": "again",
                                                             "wait": False})
            for parts in server.state.gateway.agents.values():
                await parts.agent.idle()
            listed_home = await client.get("/v1/sessions")
            listed_work = await client.get("/v1/sessions", params={"agent": "work"})
            listed_home_by_id = await client.get("/v1/sessions", params={"agent": "home"})
            unknown = await client.get("/v1/sessions", params={"agent": "nobody"})
            read_by_key = await client.get("/v1/sessions/work:webhook:w1")
            read_by_agent = await client.get("/v1/sessions/work:webhook:w1", params={"agent": "work"})
            said = await client.get("/v1/chats/w1/messages", params={"agent": "work"})
            refused = [await client.get("/v1/sessions/work:webhook:w1", params={"agent": "home"}),
                       await client.get("/v1/sessions/webhook:w1"),
                       await client.get("/v1/sessions/webhook:w1", params={"agent": "work"}),
                       await client.get("/v1/sessions/webhook:w2", params={"agent": "work"}),
                       await client.get("/v1/sessions/work:webhook:w2"),
                       await client.get("/v1/chats/w1/messages"),
                       await client.delete("/v1/sessions/webhook:w2", params={"agent": "work"})]
            reset = await client.delete("/v1/sessions/work:webhook:w1")
            await server.state.gateway.agents["work"].agent.idle()
            after_reset = await client.get("/v1/sessions/work:webhook:w1")

    assert to_work.status_code == 200 and to_work.json()["session"] == "work:webhook:w1", to_work.text
    assert to_home.status_code == 200 and to_home.json()["session"] == "webhook:w2"
    assert queued.status_code == 202 and queued.json()["session"] == "work:webhook:w1"
    assert [s["key"] for s in listed_home.json()["sessions"]] == ["webhook:w2"]
    assert [s["key"] for s in listed_home_by_id.json()["sessions"]] == ["webhook:w2"]
    assert [(s["key"], s["chat_id"]) for s in listed_work.json()["sessions"]] == [("work:webhook:w1", "w1")]
    assert unknown.status_code == 404 and "home, work" in unknown.json()["detail"]
    assert read_by_key.status_code == 200 and read_by_key.json() == read_by_agent.json()
    assert [m["content"] for m in read_by_key.json()["messages"]] == ["hi w", "work says hi", "again", "work again"]
    assert SECRET not in read_by_key.text
    assert [m["text"] for m in said.json()["messages"]] == ["work says hi", "work again"]
    for answer in refused:
        assert answer.status_code == 404, (answer.request.url, answer.text)
    # The reset ran in work: its session starts afresh, the old one archived in work's workspace.
    assert reset.status_code == 200 and reset.json()["session"] == "work:webhook:w1", reset.text
    assert after_reset.json()["messages"] == []
    assert list((work / "sessions").glob(f"{session_file_stem('work:webhook:w1')}*.old"))
    assert not (home / "sessions" / f"{session_file_stem('webhook:w1')}.jsonl").exists()
    assert [m["content"] for m in lines(home, "webhook:w2")] == ["hi h", "home says hi"]
