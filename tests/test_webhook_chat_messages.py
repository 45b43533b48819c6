"""``GET /v1/chats/{chat_id}/messages``: a reminder set in a webhook chat without a callback
is fetched by the integration (issue 11, item 7) — over real HTTP, the real scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_webhook import OWNER_AUTH, body, serving, wh_config  # noqa: F401  (fixture)


async def test_a_reminder_without_a_callback_is_fetched_by_the_integration(
        wh_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    later_today = (datetime.now(UTC) + timedelta(hours=1)).replace(tzinfo=None).isoformat(timespec="milliseconds")
    fake_llm.queue(ToolCalls([("cron", {"action": "add", "at": later_today, "text": "stand up"})]), Reply("Reminder set."))
    config = wh_config({"owners": ["boss"]}, agents={"defaults": {"timezone": "UTC"}})
    async with serving(config, OWNER_AUTH) as (server, client):  # the owner reads an owner chat
        set_it = await client.post("/v1/messages", json=body("remind me to stand up", sender="boss"))
        assert set_it.status_code == 200 and set_it.json()["reply"] == "Reminder set."
        # Bring the occurrence forward to now (no waiting on the clock).
        scheduler = server.app.state.lucid.gateway.parts.scheduler._scheduler
        scheduler.get_job("reminder:1").modify(next_run_time=datetime.now(UTC))
        scheduler.wakeup()
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            page = (await client.get("/v1/chats/c1/messages", params={"after": 0})).json()
            if any(m["kind"] == "reminder" for m in page["messages"]):
                break
            assert asyncio.get_running_loop().time() < deadline, page
            await asyncio.sleep(0.05)
        later = (await client.get("/v1/chats/c1/messages", params={"after": page["next_after"]})).json()
        unwritten = await client.get("/v1/chats/never-used/messages")
        bad = await client.get("/v1/chats/c1/messages", params={"after": -1})
    assert [(m["kind"], m["text"]) for m in page["messages"]] == [
        ("reply", "Reminder set."), ("reminder", "⏰ Reminder: stand up")]
    assert page["next_after"] == page["messages"][-1]["id"] and later["messages"] == []
    assert later["next_after"] == page["next_after"]
    assert unwritten.status_code == 403 and "adminToken" in unwritten.json()["detail"]
    assert bad.status_code == 422


async def test_a_reminder_in_a_chat_with_a_callback_is_posted_to_it_signed(
        wh_config: Callable[..., Any], fake_llm: FakeLLMServer) -> None:
    from tests.test_webhook import CallbackSink, signature_ok

    later_today = (datetime.now(UTC) + timedelta(hours=1)).replace(tzinfo=None).isoformat(timespec="milliseconds")
    fake_llm.queue(ToolCalls([("cron", {"action": "add", "at": later_today, "text": "stretch"})]), Reply("Will do."))
    config = wh_config({"owners": ["boss"]}, agents={"defaults": {"timezone": "UTC"}})
    async with CallbackSink() as sink, serving(config, OWNER_AUTH) as (server, client):
        # Answered in the response (wait=true), so the reply itself is not called back…
        set_it = await client.post("/v1/messages", json=body("remind me to stretch", sender="boss",
                                                               callback_url=sink.url))
        assert set_it.status_code == 200 and set_it.json()["reply"] == "Will do."
        scheduler = server.app.state.lucid.gateway.parts.scheduler._scheduler
        scheduler.get_job("reminder:1").modify(next_run_time=datetime.now(UTC))
        scheduler.wakeup()
        await sink.wait_for(1, timeout=60)  # …but the reminder goes to the chat's callback
        await server.app.state.lucid.gateway.parts.bus.flush_outbound()
    assert len(sink.received) == 1 and signature_ok(sink.received[0])
    payload = sink.payload(0)
    assert payload["reply"] == "⏰ Reminder: stretch" and payload["message_id"] is None
    assert payload["chat_id"] == "c1" and payload["type"] == "reply"
