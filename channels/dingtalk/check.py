"""``lucid doctor`` for DingTalk: the app's Client ID and Secret get an access token.

Blocking (httpx, synchronous): the doctor runs each check in a thread. Returns
``(ok, detail, hint)`` so the gateway's doctor renders it like every other check. Opening a
Stream connection is left to the gateway: a ticket asked for and never used would only
confuse DingTalk's view of the app's connections.
"""

from __future__ import annotations

import httpx

from lucidgate.channels.dingtalk.openapi import TOKEN_PATH
from lucidgate.channels.dingtalk.settings import DEFAULT_API_BASE

CONSOLE_HINT = ("copy them from open-dev.dingtalk.com: your app → Credentials & Basic Info → Client ID / "
                "Client Secret, into channels.dingtalk.clientId / clientSecret")


def check(client_id: str, client_secret: str, api_base: str | None, *, timeout_s: float = 10.0
          ) -> tuple[bool, str, str]:
    base = (api_base or DEFAULT_API_BASE).rstrip("/")
    if not client_id.strip() or not client_secret.strip():
        return False, "no clientId or clientSecret", CONSOLE_HINT
    try:
        response = httpx.post(base + TOKEN_PATH, json={"appKey": client_id.strip(), "appSecret": client_secret.strip()},
                              timeout=timeout_s)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return (False, f"{base} unreachable or unexpected answer ({type(exc).__name__})",
                "check the network / channels.dingtalk.apiBase")
    if response.status_code == 200 and isinstance(body, dict) and body.get("accessToken"):
        return True, f"app {client_id.strip()}: credentials accepted (oauth2/accessToken)", ""
    code = body.get("code") if isinstance(body, dict) else None
    return False, f"DingTalk refused the app credentials ({response.status_code} {code or ''})".rstrip(), CONSOLE_HINT
