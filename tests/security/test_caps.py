"""Item 6: caps a caller cannot sidestep, over real HTTP.

- Webhook rate limits: per sender *inside* a per-credential limit, plus a global one — rotating
  ``sender_id`` no longer buys more messages.
- Guests' reminders and tasks are capped per role across every chat, not per chat.
- Guest-initiated work has a daily token budget (the owner's is unlimited unless set).
"""

from __future__ import annotations

from typing import Any

from lucidgate.scheduler.reminders import ReminderStore
from tests.fakes.llm import Reply, ToolCalls
from tests.test_webhook import OWNER_AUTH, body, serving, wh_config  # noqa: F401  (fixture)


async def _post(client: Any, chat: str, sender: str, text: str = "hi", **kw: Any) -> Any:
    return await client.post("/v1/messages", json=body(text, chat=chat, sender=sender, wait=False), **kw)


async def test_rotating_senders_do_not_escape_the_credential_and_global_limits(wh_config, fake_llm):
    config = wh_config({"rateLimitPerMin": 3, "rateLimitPerCredentialPerMin": 10, "rateLimitGlobalPerMin": 12})
    async with serving(config) as (server, client):
        one = [(await _post(client, "c", "same")).status_code for _ in range(4)]
        assert one == [202, 202, 202, 429]
        rotating = [await _post(client, f"c{n}", f"sender-{n}") for n in range(10)]
        assert [r.status_code for r in rotating] == [202] * 7 + [429] * 3
        assert "rateLimitPerCredentialPerMin" in rotating[-1].json()["detail"]
        assert int(rotating[-1].headers["retry-after"]) >= 1
        # Another credential has its own budget, but every credential shares the global one.
        other = [await _post(client, f"g{n}", f"guest-{n}", headers=OWNER_AUTH) for n in range(4)]
        assert [r.status_code for r in other] == [202, 202, 429, 429]
        assert "rateLimitGlobalPerMin" in other[-1].json()["detail"]
        await server.state.gateway.parts.agent.idle()
        sessions = server.state.gateway.parts.sessions
        # Only what was accepted became a turn, and only that is stored.
        assert len(fake_llm.requests) == 3 + 7 + 2
        stored = {key: [m["content"] for m in (await sessions.get(key)).messages if m["role"] == "user"]
                  for key in [f"webhook:{chat}" for chat in ["c", *(f"c{n}" for n in range(7)), "g0", "g1"]]}
        assert stored["webhook:c"] == ["hi", "hi", "hi"]
        assert all(lines == ["hi"] for key, lines in stored.items() if key != "webhook:c")
        refused = ["c7", "c8", "c9", "g2", "g3"]
        assert not any(sessions.path_for(f"webhook:{chat}").exists() for chat in refused)


async def test_guest_reminders_are_capped_across_chats(wh_config, fake_llm, workspace):
    config = wh_config(tools={"guestTools": ["cron"]}, agents={"defaults": {"tasks": {"guestMaxActive": 3}}})
    task = ToolCalls([("cron", {"action": "add", "every": 60, "task": "say hi"})])
    async with serving(config) as (_, client):
        for n in range(5):
            fake_llm.queue(task, Reply(f"done {n}"))
            r = await client.post("/v1/messages", json=body("every minute, say hi", chat=f"chat{n}",
                                                             sender=f"guest{n}"))
            assert r.status_code == 200, r.text
    store = ReminderStore(workspace / "state" / "reminders.sqlite")
    stored = store.active()
    results = [m["content"] for req in fake_llm.requests for m in req["messages"] if m.get("role") == "tool"]
    added = [t for t in results if "set (" in t]
    refused = [t for t in results if "guestMaxActive" in t]
    assert len(added) == 3 and len(refused) == 2, results
    assert len(fake_llm.requests) == 5 * 2  # five turns: the tool call and the answer each
    # Three tasks stored, the first three chats' (each its creator's, as a guest); none after.
    assert sorted(r.session_key for r in stored) == ["webhook:chat0", "webhook:chat1", "webhook:chat2"]
    assert {(r.purpose, r.creator_role, r.text) for r in stored} == {("task", "guest", "say hi")}


async def test_guest_work_has_a_daily_token_budget_the_owner_does_not(wh_config, fake_llm):
    config = wh_config({"owners": ["boss"]}, usage={"guestDailyTokenBudget": 1000})
    async with serving(config) as (_, client):
        fake_llm.queue(Reply("first guest answer", prompt_tokens=900, completion_tokens=200))
        first = await client.post("/v1/messages", json=body("hello", chat="g1", sender="guest"))
        assert first.status_code == 200 and first.json()["reply"] == "first guest answer"
        calls = len(fake_llm.requests)
        # Spent: another guest, in another chat, is told so without a model call.
        second = await client.post("/v1/messages", json=body("hello again", chat="g2", sender="guest2"))
        assert second.status_code == 502 and second.json()["error"] is True  # a failed turn is 502
        assert "guestDailyTokenBudget" in second.json()["reply"]
        assert len(fake_llm.requests) == calls
        fake_llm.queue(Reply("owner answer", prompt_tokens=5000, completion_tokens=200))
        owner = await client.post("/v1/messages", json=body("hi", chat="o1", sender="boss"), headers=OWNER_AUTH)
        assert owner.status_code == 200 and owner.json()["reply"] == "owner answer"
