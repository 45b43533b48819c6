"""One guest cannot spend every guest's day, and guests never decide whether the owner is answered.

Over real HTTP, with the guests' pool at 10,000 tokens a day and the default ``usage.guestShare``
(a fifth of it): the webhook's integration credential spends 2,500 tokens in one answer. From
then on that credential is refused — under any sender id, in any chat — with a reply that says
when the budget resets and makes no model call; a second guest (the OpenAI endpoint, another
credential) is still answered. The guests together then pass ``usage.dailyTokenBudget``: the
owner is still answered (the owner's spending is measured without the guests'), a further guest
is not.
"""

from __future__ import annotations

import json
from typing import Any

from lucidgate.channels.webhook.auth import fingerprint
from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_webhook import OWNER_AUTH, OWNER_TOKEN, TOKEN, body, serving

OPENAI_TOKEN = "openai-guest-token-0123456789"


def two_endpoints(make_config: Any, webhook: dict[str, Any], *, channels: dict[str, Any], **sections: Any) -> Any:
    """The webhook (integration and owner tokens) and the OpenAI endpoint on one gateway."""
    hook = {"token": TOKEN, "ownerToken": OWNER_TOKEN, "waitTimeoutS": 60, "rateLimitPerMin": 1000,
            "rateLimitPerCredentialPerMin": 1000, "rateLimitGlobalPerMin": 1000, **webhook}
    return make_config(channels={"webhook": hook, **channels}, gateway={"port": 0, "shutdownGraceS": 2}, **sections)


def _completion(client: Any, text: str) -> Any:
    return client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {OPENAI_TOKEN}"},
                       json={"model": "lucidgate", "user": "second-guest", "messages": [{"role": "user", "content": text}]})


async def test_one_guest_spending_its_share_leaves_other_guests_and_the_owner_answered(
        make_config: Any, fake_llm: FakeLLMServer) -> None:
    config = two_endpoints(make_config, {"owners": ["boss"]}, usage={"guestDailyTokenBudget": 10_000, "dailyTokenBudget": 2_600},
                       channels={"openai": {"enabled": True, "waitTimeoutS": 30, "token": OPENAI_TOKEN}})
    assert config.usage.guest_share == 0.2
    async with serving(config) as (server, client):
        fake_llm.queue(Reply("the integration's answer", prompt_tokens=2_400, completion_tokens=100))
        first = await client.post("/v1/messages", json=body("hello", chat="i1", sender="alice"))
        assert first.status_code == 200 and first.json()["reply"] == "the integration's answer", first.text
        calls = len(fake_llm.requests)

        # The integration is one guest, whatever sender ids and chats it names.
        for chat, sender in (("i1", "alice"), ("i2", "bob"), ("i3", "carol")):
            refused = await client.post("/v1/messages", json=body("more", chat=chat, sender=sender))
            reply = refused.json()["reply"]
            assert refused.status_code == 502 and "usage.guestShare" in reply, refused.text
            assert "resets at 00:00 UTC, in" in reply, reply
        assert len(fake_llm.requests) == calls  # refused without a model call

        # Another guest still gets answers from the same pool.
        fake_llm.queue(Reply("the second guest's answer", prompt_tokens=250, completion_tokens=50))
        second = await _completion(client, "hi there")
        assert second.status_code == 200, second.text
        assert second.json()["choices"][0]["message"]["content"] == "the second guest's answer"

        # Guests have now spent 2,800 tokens, past usage.dailyTokenBudget (2,600): the owner is
        # still answered; a guest is not.
        fake_llm.queue(Reply("the owner's answer", prompt_tokens=400, completion_tokens=100))
        owner = await client.post("/v1/messages", json=body("hi", chat="o1", sender="boss"), headers=OWNER_AUTH)
        assert owner.status_code == 200 and owner.json()["reply"] == "the owner's answer", owner.text
        late = await _completion(client, "one more")
        assert late.status_code == 502 and "usage.dailyTokenBudget" in late.json()["error"]["message"], late.text
        await server.state.gateway.parts.agent.idle()
    spent = [json.loads(line) for path in sorted((config.workspace / "usage").glob("*.jsonl"))
             for line in path.read_text().splitlines()]
    guests = {e.get("spender") for e in spent if e.get("role") == "guest"}
    assert guests == {"credential:channels.webhook.token", "credential:channels.openai.token"}, guests
    journal = "".join(path.read_text() for path in (config.workspace / "usage").glob("*.jsonl"))
    for token in (TOKEN, OPENAI_TOKEN):  # the journal is backed up: nothing derived from a token
        assert token not in journal and fingerprint(token)[:8] not in journal
