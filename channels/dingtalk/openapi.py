"""The OpenAPI calls the DingTalk channel makes itself: the app's access token, robot sends.

The SDK has these too, but as blocking ``requests`` calls that log a failure and return None;
a reply needs an async call whose failure says whether to retry (the outbox decides). So:
``POST /v1.0/oauth2/accessToken`` (the token is cached until five minutes before it expires,
and forgotten when a send is refused with 401), and the robot's send —
``/v1.0/robot/oToMessages/batchSend`` to a person, ``/v1.0/robot/groupMessages/send`` to a
group — with ``x-acs-dingtalk-access-token``. All through one ``httpx.AsyncClient``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from lucidgate.channels.dingtalk.routes import Route

TOKEN_PATH = "/v1.0/oauth2/accessToken"
TO_PERSON_PATH = "/v1.0/robot/oToMessages/batchSend"
TO_GROUP_PATH = "/v1.0/robot/groupMessages/send"
TOKEN_MARGIN_S = 300.0


class OpenAPIError(Exception):
    """DingTalk's OpenAPI answered with an error (``status``, its ``code`` and ``message``)."""

    def __init__(self, what: str, status: int, body: Any, retry_after: str | None = None) -> None:
        fields = body if isinstance(body, dict) else {}
        self.status = status
        self.code = str(fields.get("code") or "")
        self.retry_after = retry_after
        super().__init__(f"{what} answered {status} {self.code}: {fields.get('message') or ''}".rstrip(": "))


class OpenAPI:
    def __init__(self, http: Callable[[], httpx.AsyncClient], *, client_id: str, client_secret: str,
                 robot_code: str, clock: Callable[[], float] = time.time) -> None:
        self._http = http
        self._credentials = {"appKey": client_id, "appSecret": client_secret}
        self.robot_code = robot_code
        self._clock = clock
        self._token: tuple[str, float] | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        async with self._lock:
            if self._token is not None and self._clock() < self._token[1]:
                return self._token[0]
            response = await self._http().post(TOKEN_PATH, json=self._credentials)
            body = _json(response)
            token = body.get("accessToken") if isinstance(body, dict) else None
            if response.status_code != 200 or not token:
                raise OpenAPIError("accessToken", response.status_code, body, response.headers.get("retry-after"))
            expires_in = float(body.get("expireIn") or 7200)
            self._token = (str(token), self._clock() + max(0.0, expires_in - TOKEN_MARGIN_S))
            return str(token)

    def forget_token(self) -> None:
        self._token = None

    async def send(self, chat_id: str, route: Route, msg_key: str, param: dict[str, str]) -> None:
        """One robot message (``sampleMarkdown`` or ``sampleText``) to the chat ``route`` names."""
        body: dict[str, Any] = {"robotCode": self.robot_code, "msgKey": msg_key,
                                "msgParam": json.dumps(param, ensure_ascii=False)}
        if route.group:
            path, body["openConversationId"] = TO_GROUP_PATH, chat_id
        else:
            path, body["userIds"] = TO_PERSON_PATH, [route.user_id]
        token = await self.token()
        response = await self._http().post(path, json=body, headers={"x-acs-dingtalk-access-token": token})
        if response.status_code == 401:
            self.forget_token()  # the next attempt asks for a new one
        if response.status_code != 200:
            raise OpenAPIError(path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1], response.status_code,
                               _json(response), response.headers.get("retry-after"))


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {}
