"""Item 8: the OpenAI-compatible endpoint shares the webhook's per-credential and global limits.

Over real HTTP: 200 chat completions with the integration token, each from a different session
id (the caller picks those, as it picks a webhook ``sender_id``), get 429s with ``Retry-After``
once the credential's allowance is spent; the webhook then refuses the same token too (one
bucket, not one per endpoint), while another credential still gets through.
"""

from __future__ import annotations

import time
from typing import Any

from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_webhook import OWNER_AUTH, OWNER_TOKEN, TOKEN, body, serving

PER_CREDENTIAL = 30


def two_endpoints(make_config: Any, webhook: dict[str, Any], *, channels: dict[str, Any], **sections: Any) -> Any:
    """The webhook (integration and owner tokens) and the OpenAI endpoint on one gateway."""
    hook = {"token": TOKEN, "ownerToken": OWNER_TOKEN, "waitTimeoutS": 60, "rateLimitPerMin": 1000,
            "rateLimitPerCredentialPerMin": 1000, "rateLimitGlobalPerMin": 1000, **webhook}
    return make_config(channels={"webhook": hook, **channels}, gateway={"port": 0, "shutdownGraceS": 2}, **sections)


async def test_the_openai_endpoint_shares_the_webhooks_credential_limit(make_config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.default = lambda request: Reply("ok")
    config = two_endpoints(make_config, {"rateLimitPerMin": 1000, "rateLimitPerCredentialPerMin": PER_CREDENTIAL,
                        "rateLimitGlobalPerMin": 1000, "owners": ["boss"]},
                       channels={"openai": {"enabled": True, "waitTimeoutS": 30}})
    async with serving(config) as (server, client):
        started = time.monotonic()
        answers = []
        for n in range(200):
            answers.append(await client.post("/v1/chat/completions", json={
                "model": "lucidgate", "user": f"session-{n}", "messages": [{"role": "user", "content": "hi"}]}))
        elapsed = time.monotonic() - started
        # The same token on the webhook meets the bucket the endpoint above emptied.
        hook = await client.post("/v1/messages", json=body("hello", chat="w1", sender="w1", wait=False))
        other = await client.post("/v1/messages", json=body("hello", chat="o1", sender="boss", wait=False),
                                  headers=OWNER_AUTH)
        await server.state.gateway.parts.agent.idle()
    codes = [a.status_code for a in answers]
    assert set(codes) == {200, 429}, codes
    passed = codes.count(200)
    refill = int(elapsed * PER_CREDENTIAL / 60) + 1  # the bucket refills while the test runs
    assert PER_CREDENTIAL <= passed <= PER_CREDENTIAL + refill, (passed, elapsed)
    assert codes[:PER_CREDENTIAL] == [200] * PER_CREDENTIAL
    limited = [a for a in answers if a.status_code == 429]
    for answer in limited:
        assert int(answer.headers["retry-after"]) >= 1
        error = answer.json()["error"]
        assert error["type"] == "rate_limit_error" and "rateLimitPerCredentialPerMin" in error["message"]
    assert hook.status_code == 429 and "rateLimitPerCredentialPerMin" in hook.json()["detail"], hook.text
    assert int(hook.headers["retry-after"]) >= 1
    assert other.status_code == 202, other.text  # another credential has its own allowance
    assert len(fake_llm.requests) == passed + 1  # refused calls never reached the model


async def test_the_openai_endpoint_counts_against_the_global_limit(make_config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.default = lambda request: Reply("ok")
    config = two_endpoints(make_config, {"rateLimitPerMin": 1000, "rateLimitPerCredentialPerMin": 1000, "rateLimitGlobalPerMin": 5,
                        "owners": ["boss"]},
                       channels={"openai": {"enabled": True, "waitTimeoutS": 30, "token": "own-openai-token-0123456789"}})
    async with serving(config) as (server, client):
        own = {"Authorization": "Bearer own-openai-token-0123456789"}
        started = time.monotonic()
        codes = [(await client.post("/v1/chat/completions", headers=own, json={
            "model": "lucidgate", "user": f"s{n}", "messages": [{"role": "user", "content": "hi"}]})).status_code
            for n in range(5)]
        refill = int((time.monotonic() - started) * 5 / 60) + 1  # the bucket refills while the test runs
        hooks = [await client.post("/v1/messages", json=body("hello", chat="o1", sender="boss", wait=False),
                                   headers=OWNER_AUTH) for _ in range(refill + 1)]
        await server.state.gateway.parts.agent.idle()
    assert codes == [200] * 5
    refused = hooks[-1]  # another credential, but the gateway's global bucket is the one just emptied
    assert refused.status_code == 429 and "rateLimitGlobalPerMin" in refused.json()["detail"], refused.text
