"""``lucid doctor`` for the Matrix channel: homeserver reachable, credential valid, encryption.

Blocking (plain ``httpx``), run in a thread by the doctor. The credential checked is the
configured access token or, with a password, the session the gateway saved in the workspace
(the doctor never logs in itself: that would add a device to the account). Encryption is
not supported, so every joined room the homeserver marks encrypted is listed: the bot
cannot read or answer there.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from lucidgate.config.schema import Config
from lucidgate.gateway.ops.checks import HTTP_TIMEOUT_S, Result, fail, ok, warn

MAX_ROOMS_CHECKED = 200


def matrix_checks(config: Config) -> list[Result]:
    section = config.channels.matrix
    if not section.enabled:
        return []
    from lucidgate.channels.matrix import preflight
    from lucidgate.channels.matrix.state import load_state, state_path

    reason = preflight(section)
    if reason is not None:
        return [fail("matrix", reason, "see docs/channels/matrix.md")]
    base = section.homeserver.rstrip("/")
    token = section.access_token.get_secret_value()
    if not token:
        token = load_state(state_path(config.workspace), base, section.user_id).access_token or ""
    try:
        with httpx.Client(base_url=base, timeout=HTTP_TIMEOUT_S) as http:
            versions = http.get("/_matrix/client/versions")
            if versions.status_code != 200:
                return [fail("matrix", f"{base} answered {versions.status_code} to /versions",
                             "check channels.matrix.homeserver (the client API's URL)")]
            if not token:
                return [ok("matrix", f"{base} reachable; the gateway logs in with the password at its first start")]
            auth = {"Authorization": f"Bearer {token}"}
            who = http.get("/_matrix/client/v3/account/whoami", headers=auth)
            if who.status_code != 200:
                return [fail("matrix", f"whoami refused the credential ({_errcode(who)})",
                             "set a valid channels.matrix.accessToken (or the password, and restart)")]
            user = who.json().get("user_id")
            return [ok("matrix", f"{user} on {base} (whoami)"), _encryption(http, auth)]
    except (httpx.HTTPError, ValueError) as exc:
        return [fail("matrix", f"{base} unreachable ({type(exc).__name__})",
                     "check the network / channels.matrix.homeserver")]


def _encryption(http: httpx.Client, auth: dict[str, str]) -> Result:
    rooms = http.get("/_matrix/client/v3/joined_rooms", headers=auth).json().get("joined_rooms", [])
    encrypted = [room for room in rooms[:MAX_ROOMS_CHECKED]
                 if http.get(f"/_matrix/client/v3/rooms/{quote(room)}/state/m.room.encryption/",
                             headers=auth).status_code == 200]
    if not encrypted:
        return ok("matrix e2ee", f"not supported; none of the bot's {len(rooms)} room(s) is encrypted")
    shown = ", ".join(encrypted[:5]) + (" …" if len(encrypted) > 5 else "")
    return warn("matrix e2ee", f"end-to-end encryption is not supported: the bot cannot read or answer "
                f"in {len(encrypted)} encrypted room(s): {shown}",
                "talk to the bot in an unencrypted room or direct chat (encryption cannot be switched "
                "off in a room), and remove it from the encrypted ones")


def _errcode(response: httpx.Response) -> str:
    try:
        return str(response.json().get("errcode") or response.status_code)
    except ValueError:
        return str(response.status_code)
