"""Signing the Matrix channel in: an access token from the config, or a password login once.

With ``accessToken`` the token is used as given (``whoami`` checks it and names the account
and device). With ``password`` the first start logs in (one new device, named by
``deviceName``) and keeps the session in the workspace state; later starts reuse it and log
in again only when the homeserver no longer accepts it. A refused credential is a
``ConfigError`` naming the setting; an unreachable homeserver is a ``MatrixCallError`` or
a connection error, which the channel retries.
"""

from __future__ import annotations

import logging

from nio import AsyncClient, LoginResponse, WhoamiResponse

from lucidgate.channels.matrix.calls import MatrixCallError, checked
from lucidgate.channels.matrix.state import MatrixState
from lucidgate.config.errors import ConfigError

logger = logging.getLogger(__name__)


async def sign_in(client: AsyncClient, state: MatrixState, *, access_token: str, password: str,
                  device_name: str) -> bool:
    """Give ``client`` a working session; True when ``state`` gained a new one to save."""
    if access_token:
        await _whoami(client, access_token, "channels.matrix.accessToken")
        return False
    if state.access_token:
        try:
            await _whoami(client, state.access_token, None)
            return False
        except ConfigError:
            logger.info("the saved Matrix session was signed out; logging in again")
    if not client.user:
        raise ConfigError("channels.matrix.userId is needed to log in with a password")
    client.device_id = state.device_id or ""
    response = await client.login(password=password, device_name=device_name)
    if not isinstance(response, LoginResponse):
        status = getattr(getattr(response, "transport_response", None), "status", None)
        if status in (400, 401, 403):
            raise ConfigError(f"the homeserver refused the Matrix login for {client.user}: "
                              f"{getattr(response, 'message', response)}; check channels.matrix.password")
        raise MatrixCallError("login", status, getattr(response, "status_code", None),
                              str(getattr(response, "message", response)))
    state.access_token, state.device_id, state.user_id = response.access_token, response.device_id, response.user_id
    return True


async def _whoami(client: AsyncClient, token: str, setting: str | None) -> None:
    client.access_token = token
    try:
        who = await checked("whoami", client.whoami)
    except MatrixCallError as exc:
        if not exc.unauthorized:
            raise
        client.access_token = ""
        raise ConfigError(f"the homeserver rejected {setting or 'the saved Matrix session'}; "
                          f"set a valid access token ({exc.errcode})") from None
    assert isinstance(who, WhoamiResponse)
    client.user_id = client.user = who.user_id
    client.device_id = who.device_id or client.device_id
