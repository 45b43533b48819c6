"""The web console: a static page served with a strict CSP, driving the webhook API."""

from __future__ import annotations

import re
from typing import Any

import httpx

from gateway.serve import GatewayServer
from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_webhook import AUTH, TOKEN


async def test_console_page_and_the_calls_it_makes(make_config: Any, fake_llm: FakeLLMServer) -> None:
    config = make_config(channels={"webhook": {"token": TOKEN}}, gateway={"port": 0})
    fake_llm.queue(Reply("hello from the console"))
    async with GatewayServer(config, access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as anonymous:
            page = await anonymous.get("/console")
            # the page is public, but the API behind it is not
            assert (await anonymous.get("/v1/sessions/webhook:console")).status_code == 401
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            sent = await client.post("/v1/messages", json={"chat_id": "console", "sender_id": "console",
                                                           "text": "hi", "wait": True})
            history = await client.get("/v1/sessions/webhook:console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    html = page.text
    assert '"/v1/messages"' in html and '"webhook:" + CHAT' in html and "textContent = content" in html
    assert re.search(r"CHAT = \"console\"", html)
    assert "innerHTML" not in html  # replies are rendered as text, never markup
    assert sent.status_code == 200 and sent.json()["reply"] == "hello from the console"
    roles = [(m["role"], m["content"]) for m in history.json()["messages"]]
    assert ("user", "hi") in roles and ("assistant", "hello from the console") in roles
