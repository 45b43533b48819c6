"""Item 3: holding the webhook's integration token never makes anyone the owner.

Over real HTTP: an integration-token request naming an owner's ``sender_id`` gets no owner
turn (the instruction-following fake model asks for ``exec``; nothing runs), and the
integration token never reads an owner's transcript — not even of a chat it once wrote to.
The owner speaks with ``channels.webhook.ownerToken``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from lucidgate.channels.webhook.auth import ChatLedger, fingerprint
from tests.fakes.llm import Reply, ToolCalls
from tests.test_webhook import TOKEN, body, serving, wh_config  # noqa: F401  (fixture)

OWNER_TOKEN = "owner-token-0123456789abcdef"
OWNER = {"Authorization": f"Bearer {OWNER_TOKEN}"}


def _exec_marker(workspace: Any) -> ToolCalls:
    return ToolCalls([("exec", {"command": "touch owned.txt"})])


async def test_the_integration_token_cannot_speak_as_the_owner(wh_config, fake_llm, workspace):
    config = wh_config({"owners": ["boss"], "ownerToken": OWNER_TOKEN})
    fake_llm.queue(_exec_marker(workspace), Reply("done"))
    async with serving(config) as (_, client):
        r = await client.post("/v1/messages", json=body("run it", chat="x", sender="boss"))
        assert r.status_code == 403, r.text
        assert "ownerToken" in r.json()["detail"]
        assert not fake_llm.requests and not (workspace / "owned.txt").exists()
        # The owner credential with the same sender is the owner: tools, and exec runs.
        r = await client.post("/v1/messages", json=body("run it", chat="o", sender="boss"), headers=OWNER)
        assert r.status_code == 200, r.text
    assert "exec" in {t["function"]["name"] for t in fake_llm.requests[0].get("tools", [])}
    assert (workspace / "owned.txt").exists()


async def test_the_owner_token_with_a_stranger_sender_is_a_guest(wh_config, fake_llm):
    config = wh_config({"owners": ["boss"], "ownerToken": OWNER_TOKEN})
    async with serving(config) as (_, client):
        r = await client.post("/v1/messages", json=body("hi", chat="g", sender="someone"), headers=OWNER)
    assert r.status_code == 200, r.text
    assert not fake_llm.requests[0].get("tools")


async def test_the_integration_token_never_reads_an_owner_transcript(wh_config, fake_llm, workspace):
    config = wh_config({"owners": ["boss"], "ownerToken": OWNER_TOKEN})
    fake_llm.queue(Reply("owner secret plans"))
    async with serving(config) as (server, client):
        r = await client.post("/v1/messages", json=body("plans?", chat="mine", sender="boss"), headers=OWNER)
        assert r.status_code == 200, r.text
        # Even a record saying the integration token wrote to it (as it could before owner
        # tokens existed) gives it no read of an owner's chat.
        ledger = ChatLedger(workspace / "state" / "webhook_chats.sqlite")
        await asyncio.to_thread(ledger.claim, "mine", "owner", fingerprint(TOKEN))
        ledger.close()
        for path in ("/v1/sessions/webhook:mine", "/v1/chats/mine/messages"):
            denied = await client.get(path)
            assert denied.status_code == 403, (path, denied.text)
            assert "owner secret plans" not in denied.text
            allowed = await client.get(path, headers=OWNER)
            assert allowed.status_code == 200, (path, allowed.text)
            assert "owner secret plans" in allowed.text
        listed = await client.get("/v1/sessions")
        assert "webhook:mine" not in listed.text
        async with httpx.AsyncClient(base_url=server.url, headers=OWNER) as owner:
            assert "webhook:mine" in (await owner.get("/v1/sessions")).text


def test_doctor_flags_owners_without_an_owner_token_and_the_sandbox_state(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from lucidgate.gateway.cli import build_app

    workspace = tmp_path / "ws"
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model", "llmRetries": 0}},
        "providers": {"openai": {"apiKey": "sk-x", "apiBase": "http://127.0.0.1:9/v1"}},
        "channels": {"webhook": {"token": "t" * 40, "owners": ["boss"]}},
        "tools": {"exec": {"sandbox": "off"}}}))
    path.chmod(0o600)
    result = CliRunner().invoke(build_app(), ["doctor", "--config", str(path), "--json"])
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    owner = checks["owner tokens"]
    assert owner["state"] == "warn" and "channels.webhook.ownerToken" in owner["detail"] and "boss" in owner["detail"]
    assert "--webhook-owner-token" in owner["fix"]
    sandbox = checks["exec sandbox"]
    assert sandbox["state"] == "warn" and "off" in sandbox["detail"]
