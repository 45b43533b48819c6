"""The role is decided once, by the gate that admitted the message, and travels with it.

Over real HTTP: a webhook message the gate admitted as a guest stays a guest's turn even
when, by the time the turn runs, the config would call its sender an owner — here, a turn
cut off by a shutdown and resumed after a restart whose config lists that sender in
``owners``. Recomputing the role from the config at that point would hand words that came
in on the integration token an owner turn (the fake model asks for ``exec``; nothing runs).
"""

from __future__ import annotations

from typing import Any

from tests.fakes.llm import Hang, Reply, ToolCalls
from tests.test_webhook import body, serving, transcript, wh_config  # noqa: F401  (fixture)


async def test_a_guest_turn_resumed_after_the_owner_list_changed_stays_a_guest(wh_config, fake_llm, workspace):
    before = wh_config({"owners": []}, gateway={"shutdownGraceS": 0.2},
                       agents={"defaults": {"llmTimeoutS": 30}})
    fake_llm.queue(Hang(5))
    async with serving(before) as (_, client):
        r = await client.post("/v1/messages", json=body("run it", chat="x", sender="boss", wait=False))
        assert r.status_code == 202, r.text
        await fake_llm.wait_for_requests(1)
    lines = transcript(workspace, "webhook:x")
    assert lines[-1]["role"] == "user" and lines[-1]["sender_role"] == "guest"

    after = wh_config({"owners": ["boss"]})
    fake_llm.queue(ToolCalls([("exec", {"command": "touch owned.txt"})]), Reply("done"))
    async with serving(after) as (server, _):
        await fake_llm.wait_for_requests(2)
        await server.state.gateway.parts.agent.idle()
    resumed: dict[str, Any] = fake_llm.requests[1]
    assert "exec" not in {t["function"]["name"] for t in resumed.get("tools", [])}
    assert not (workspace / "owned.txt").exists()
    assert "(guest)" in fake_llm.last_user_text(resumed)
