"""Webhook credentials are not the owner, and a session never mixes roles (issue 11, item 5).

Black-box over real HTTP: the real gateway on loopback, litellm against the fake OpenAI
server. What a guest's turn was built on is read from the fake server's ``requests``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lucidgate.gateway.daemon.serve import GatewayServer
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.sessions import load_session_file
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls

TOKEN = "integration-token-0123456789"
ROTATED = "integration-token-rotated-987"
ADMIN = "admin-token-abcdefghijklmnop"
OWNER_TOKEN = "owner-token-qrstuvwxyz012345"
PIN = "remember my PIN: 4417-2290"
MEMLINE = "- Bank hint: MEMLINE-7731"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def hook_config(make_config: Callable[..., Any], fake_llm: FakeLLMServer, workspace: Path) -> Callable[..., Any]:
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    (workspace / "memory" / "MEMORY.md").write_text(f"# Memory\n\n{MEMLINE}\n")

    def build(**webhook: Any) -> Any:
        hook = {"token": TOKEN, "ownerToken": OWNER_TOKEN, "owners": ["me"], "waitTimeoutS": 60, "rateLimitPerMin": 1000, **webhook}
        return make_config(channels={"webhook": hook}, gateway={"port": 0, "shutdownGraceS": 2})

    return build


@asynccontextmanager
async def serving(config: Any, token: str = TOKEN) -> AsyncIterator[tuple[GatewayServer, httpx.AsyncClient]]:
    async with GatewayServer(config, access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=auth(token), timeout=30) as client:
            yield server, client


def post(chat: str, sender: str, text: str) -> dict[str, Any]:
    return {"chat_id": chat, "sender_id": sender, "text": text}


def transcript(workspace: Path, key: str) -> list[dict[str, Any]]:
    path = workspace / "sessions" / f"{session_file_stem(key)}.jsonl"
    return load_session_file(path).messages if path.exists() else []


def requests_with(fake: FakeLLMServer, needle: str) -> list[str]:
    texts = [json.dumps(r.get("messages"), ensure_ascii=False) for r in fake.requests]
    return [t for t in texts if needle in t]


async def test_a_guest_never_joins_the_owners_chat_and_never_sees_its_transcript(
        hook_config, fake_llm: FakeLLMServer, workspace: Path) -> None:
    async with serving(hook_config()) as (server, client):
        # The owner's turn: a PIN in the text, MEMORY.md in the prompt, a tool result with its lines.
        fake_llm.queue(ToolCalls([("read_file", {"path": "memory/MEMORY.md"})]), Reply("Noted, PIN kept."))
        r = await client.post("/v1/messages", json=post("c1", "me", PIN), headers=auth(OWNER_TOKEN))
        assert r.status_code == 200 and r.json()["session"] == "webhook:c1", r.text
        owner_prompts = requests_with(fake_llm, PIN)
        assert owner_prompts and "MEMLINE-7731" in owner_prompts[-1]  # it really held the owner's memory
        owner_lines = transcript(workspace, "webhook:c1")

        # A guest posts into the same chat_id: refused, nothing accepted, no turn run.
        seen = len(fake_llm.requests)
        r = await client.post("/v1/messages", json=post("c1", "stranger", "what did the owner say? guest-words"))
        assert r.status_code == 403, r.text
        assert "belongs to another role" in r.json()["detail"] and "owner" in r.json()["detail"]
        await server.state.gateway.parts.agent.idle()
        assert len(fake_llm.requests) == seen
        assert transcript(workspace, "webhook:c1") == owner_lines  # guest text never lands there

        # In a chat of its own the guest is answered, from a prompt with none of the owner's words.
        fake_llm.queue(Reply("Hello guest."))
        r = await client.post("/v1/messages", json=post("c2", "stranger", "hello from guest-words"))
        assert r.status_code == 200 and r.json()["reply"] == "Hello guest.", r.text
        [guest_prompt] = requests_with(fake_llm, "hello from guest-words")
        for secret in ("4417-2290", "MEMLINE-7731", "PIN kept"):
            assert secret not in guest_prompt, secret
        assert "(guest)" in guest_prompt and "(owner)" in owner_prompts[-1]

        # Nor may the owner walk into the guest's chat (its memory would flow to guests).
        r = await client.post("/v1/messages", json=post("c2", "me", "owner here"), headers=auth(OWNER_TOKEN))
        assert r.status_code == 403 and "a guest's chat" in r.json()["detail"]
    assert all("guest-words" not in json.dumps(m) for m in transcript(workspace, "webhook:c1"))
    owner_file = (workspace / "sessions" / f"{session_file_stem('webhook:c1')}.jsonl").read_text()
    assert "guest-words" not in owner_file and "owner here" not in transcript(workspace, "webhook:c2")[-1]["content"]


async def test_the_bearer_token_is_not_the_owner(hook_config, fake_llm: FakeLLMServer) -> None:
    """Holding the token and naming any sender_id not in owners gives a guest's turn."""
    async with serving(hook_config()) as (_, client):
        fake_llm.queue(Reply("hi"))
        r = await client.post("/v1/messages", json=post("c9", "integration-bot", "who am I? tok-probe"))
        assert r.status_code == 200, r.text
    [prompt] = requests_with(fake_llm, "tok-probe")
    assert "integration-bot (guest)" in prompt and "MEMLINE-7731" not in prompt


async def test_the_roles_of_chats_survive_a_restart(hook_config, fake_llm: FakeLLMServer) -> None:
    config = hook_config()
    async with serving(config) as (_, client):
        assert (await client.post("/v1/messages", json=post("c1", "me", "owner first"), headers=auth(OWNER_TOKEN))).status_code == 200
    async with serving(config) as (_, client):
        r = await client.post("/v1/messages", json=post("c1", "guest", "after the restart"))
        assert r.status_code == 403, r.text
        assert (await client.post("/v1/messages", json=post("c1", "me", "owner again"), headers=auth(OWNER_TOKEN))).status_code == 200
    assert not requests_with(fake_llm, "after the restart")


async def test_sessions_api_admin_sees_all_an_integration_token_only_its_chats(
        hook_config, fake_llm: FakeLLMServer) -> None:
    async with serving(hook_config(adminToken=ADMIN)) as (_, client):
        for chat in ("a1", "a2"):
            assert (await client.post("/v1/messages", json=post(chat, "u", f"hi {chat}"))).status_code == 200
    # The integration token is rotated: the new one wrote nothing yet.
    async with serving(hook_config(token=ROTATED, adminToken=ADMIN), token=ROTATED) as (_, client):
        assert (await client.post("/v1/messages", json=post("b1", "u", "hi b1"))).status_code == 200
        listed = {s["key"] for s in (await client.get("/v1/sessions")).json()["sessions"]}
        assert listed == {"webhook:b1"}
        assert (await client.get("/v1/sessions/webhook:b1")).status_code == 200
        r = await client.get("/v1/sessions/webhook:a1")
        assert r.status_code == 403 and "channels.webhook.adminToken" in r.json()["detail"]
        assert "is not set" not in r.json()["detail"]
        assert (await client.delete("/v1/sessions/webhook:a1")).status_code == 403
        admin = {"headers": auth(ADMIN)}
        everything = {s["key"] for s in (await client.get("/v1/sessions", **admin)).json()["sessions"]}
        assert everything == {"webhook:a1", "webhook:a2", "webhook:b1"}
        detail = (await client.get("/v1/sessions/webhook:a1", **admin)).json()
        assert [m["content"] for m in detail["messages"]][0] == "hi a1"
        assert (await client.get("/v1/sessions", headers=auth("not-a-token"))).status_code == 401
        r = await client.delete("/v1/sessions/webhook:a2", **admin)
        assert r.status_code == 200 and "fresh" in r.json()["reply"]
        assert (await client.get("/v1/sessions/webhook:a2", **admin)).json()["messages"] == []


async def test_without_an_admin_token_other_chats_stay_closed(hook_config, fake_llm: FakeLLMServer) -> None:
    async with serving(hook_config()) as (_, client):
        assert (await client.post("/v1/messages", json=post("a1", "u", "hi"))).status_code == 200
    async with serving(hook_config(token=ROTATED), token=ROTATED) as (_, client):
        assert (await client.get("/v1/sessions")).json()["sessions"] == []
        r = await client.get("/v1/sessions/webhook:a1")
        assert r.status_code == 403
        assert "channels.webhook.adminToken is not set" in r.json()["detail"]
        r = await client.get("/v1/sessions", headers=auth(ADMIN))  # no admin token configured
        assert r.status_code == 401


async def test_the_integration_token_is_not_an_owner_credential_on_the_openai_endpoint(
        make_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    """``channels.openai.owner: true`` without its own token: the webhook's token gets no owner turn."""
    chat = {"model": "lucidgate", "messages": [{"role": "user", "content": "read my USER.md oa-probe"}]}
    guest_api = make_config(channels={"webhook": {"token": TOKEN}, "openai": {"owner": False}},
                            gateway={"port": 0, "shutdownGraceS": 2})
    owner_api = make_config(channels={"webhook": {"token": TOKEN}, "openai": {"owner": True}},
                            gateway={"port": 0, "shutdownGraceS": 2})
    async with serving(owner_api) as (_, client):
        r = await client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 503 and "channels.openai.token" in r.text, r.text
    assert not requests_with(fake_llm, "oa-probe")  # no turn ran at all
    async with serving(guest_api) as (_, client):  # a guest endpoint may share the token
        fake_llm.queue(Reply("hello guest"))
        r = await client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200, r.text
    [prompt] = requests_with(fake_llm, "oa-probe")
    assert "(guest)" in prompt
