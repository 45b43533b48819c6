"""``lucid doctor`` for Discord: the token works (REST) and the Message Content intent is on.

Blocking (httpx, synchronous): the doctor runs each check in a thread. Returns
``(ok, detail, hint)`` so the gateway's doctor renders it like every other check.
"""

from __future__ import annotations

import httpx

from lucidgate.channels.discord.sdk import MESSAGE_CONTENT_FLAGS, rest_base

PORTAL_HINT = ("enable it in the Developer Portal: your application → Bot → Privileged Gateway Intents → "
               "Message Content Intent")


def check(token: str, api_base: str | None, *, timeout_s: float = 10.0) -> tuple[bool, str, str]:
    """``GET /users/@me`` (the token) and ``GET /oauth2/applications/@me`` (the intent flags)."""
    base = rest_base(api_base)
    if not token.strip():
        return False, "no bot token", "set channels.discord.token (Developer Portal → Bot → Reset Token)"
    headers = {"Authorization": f"Bot {token.strip()}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=timeout_s) as http:
            me = http.get("/users/@me")
            if me.status_code == 401:
                return (False, "Discord refused the token (401)",
                        "put the bot token from the Developer Portal in channels.discord.token")
            me.raise_for_status()
            app = http.get("/oauth2/applications/@me")
            app.raise_for_status()
            name, flags = me.json().get("username"), int(app.json().get("flags") or 0)
    except (httpx.HTTPError, ValueError) as exc:
        return (False, f"{base} unreachable or unexpected answer ({type(exc).__name__})",
                "check the network / channels.discord.apiBase")
    if not flags & MESSAGE_CONTENT_FLAGS:
        return False, f"bot {name}: the Message Content intent is off", PORTAL_HINT
    return True, f"bot {name}, Message Content intent on (users/@me, applications/@me)", ""
