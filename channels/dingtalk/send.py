"""Outbound delivery for the DingTalk channel: replies through the session webhook, or the OpenAPI.

A robot message carries a session webhook that answers its conversation without a token for a
while (about 90 minutes). A reply goes there while it is valid, and through the OpenAPI robot
send (``openapi``) once it has expired — by its ``sessionWebhookExpiredTime``, or because
DingTalk refused it (any error answer but a rate limit): the chat then uses the OpenAPI until
its next message brings a new webhook. A reply is markdown (``sampleMarkdown``); fixed text (a
refusal) goes as text. Long replies go in parts (``format.to_chunks``), each counted, so a retry
by the outbox starts at the first part DingTalk did not take.

Every call goes through the channel's ``OutboundLimiter``: a 429 or DingTalk's "sending too
fast" (``130101``) pauses the channel; a refused connection is retried; a timeout is not
resent at once (it may have arrived). DingTalk has no typing action: ``progressText`` (if set)
is sent once when a turn starts, best effort.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry, OutboundLimiter, Verdict
from lucidgate.channels.dingtalk.format import split_plain, title_of, to_chunks
from lucidgate.channels.dingtalk.openapi import OpenAPI, OpenAPIError
from lucidgate.channels.dingtalk.routes import Route, Routes
from lucidgate.channels.messages import OutboundError, OutboundMessage, OutboundProgress, OutboundText, OutboundTyping
from lucidgate.config.errors import LucidError

logger = logging.getLogger(__name__)

TOO_FAST = 130101  # the session webhook's errcode for "sending too fast"
_PROGRESS_KEEP = 1000


class WebhookError(Exception):
    """The session webhook answered with an error (HTTP ``status``, DingTalk's ``errcode``)."""

    def __init__(self, status: int, errcode: int, errmsg: str) -> None:
        self.status, self.errcode = status, errcode
        super().__init__(f"session webhook answered {status}, errcode {errcode}: {errmsg}")

    @property
    def refused(self) -> bool:
        """The webhook is no use any more (expired, invalid): the OpenAPI takes over."""
        return self.status < 500 and self.status != 429 and self.errcode != TOO_FAST


def classify(exc: BaseException) -> Verdict:
    """How the limiter treats a failed call (see ``channels._ratelimit``)."""
    if isinstance(exc, WebhookError):
        if exc.status == 429 or exc.errcode == TOO_FAST:
            return Verdict.wait(60.0)  # the webhook's limit is per minute
        return Verdict.retry() if exc.status >= 500 else Verdict.fail()
    if isinstance(exc, OpenAPIError):
        if exc.status == 429:
            try:
                return Verdict.wait(float(exc.retry_after or 1.0))
            except ValueError:
                return Verdict.wait(1.0)
        return Verdict.retry() if exc.status >= 500 or exc.status == 401 else Verdict.fail()
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return Verdict.retry()  # nothing reached DingTalk
    if isinstance(exc, httpx.HTTPError):
        return Verdict.uncertain()  # it may have been delivered: do not post twice at once
    return Verdict.fail()


class DingTalkSender:
    def __init__(self, http: Callable[[], httpx.AsyncClient], openapi: OpenAPI, routes: Routes,
                 limiter: OutboundLimiter, *, progress_text: str | None, webhook_margin_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._http = http
        self.openapi = openapi
        self.routes = routes
        self.limiter = limiter
        self._progress_text = progress_text
        self._margin_s = webhook_margin_s
        self._clock = clock
        self._progress_shown: OrderedDict[str, None] = OrderedDict()
        self.fallbacks = 0  # parts sent through the OpenAPI because the webhook could not be used

    async def send(self, msg: OutboundMessage) -> None:
        if isinstance(msg, OutboundTyping):
            await self._progress(msg.target.chat_id, msg.target.reply_to)
            return
        if isinstance(msg, OutboundProgress):
            return  # no streaming: the answer is sent whole
        chat_id = msg.target.chat_id
        route = self.routes.get(chat_id)
        if route is None:
            raise DeliveryFailed(f"no way back to DingTalk chat {chat_id} is known (it never wrote here)",
                                 permanent=True)
        plain = isinstance(msg, OutboundText) and msg.plain
        text = f"⚠️ {msg.text}" if isinstance(msg, OutboundError) else msg.text
        if isinstance(msg, OutboundText) and msg.files:
            text += "\n\n(files are not sent on DingTalk: " + ", ".join(msg.files) + ")"
        parts = split_plain(text) if plain else to_chunks(text)
        done = msg.skip_parts
        try:
            for i, part in enumerate(parts):
                if i < done:
                    continue
                await self._deliver(chat_id, part, plain=plain)
                done = i + 1
        except (DeliveryRetry, DeliveryFailed) as exc:
            exc.parts_done = done
            raise
        except (WebhookError, OpenAPIError) as exc:
            hint = (" (does the app have the robot's send permission? see docs/channels/dingtalk.md)"
                    if isinstance(exc, OpenAPIError) and exc.status == 403 else "")
            logger.warning("DingTalk refused a reply to %s: %s%s", chat_id, exc, hint)
            raise DeliveryFailed(str(exc), permanent=True, parts_done=done) from exc
        except (LucidError, httpx.HTTPError) as exc:
            raise DeliveryRetry(f"{type(exc).__name__}: {exc}", parts_done=done) from exc

    async def _deliver(self, chat_id: str, part: str, *, plain: bool) -> None:
        """One part: the session webhook while it is valid, else (or when refused) the OpenAPI."""
        route = self.routes.get(chat_id)
        assert route is not None
        if route.webhook_usable(self._clock(), self._margin_s):
            try:
                await self.limiter.run(chat_id, lambda: self._via_webhook(route, part, plain=plain),
                                       what="session webhook")
                return
            except WebhookError as exc:
                if not exc.refused:
                    raise
                logger.info("the session webhook of DingTalk chat %s was refused (%s); using the OpenAPI",
                            chat_id, exc)
                self.routes.forget_webhook(chat_id)
        self.fallbacks += 1
        key, param = (("sampleText", {"content": part}) if plain
                      else ("sampleMarkdown", {"title": title_of(part), "text": part}))
        await self.limiter.run(chat_id, lambda: self.openapi.send(chat_id, route, key, param), what="robot send")

    async def _via_webhook(self, route: Route, part: str, *, plain: bool) -> None:
        assert route.webhook is not None
        body: dict[str, Any] = ({"msgtype": "text", "text": {"content": part}} if plain
                                else {"msgtype": "markdown", "markdown": {"title": title_of(part), "text": part}})
        response = await self._http().post(route.webhook, json=body)
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        fields = answer if isinstance(answer, dict) else {}
        errcode = int(fields.get("errcode") or 0) if response.status_code == 200 else -1
        if response.status_code != 200 or errcode != 0:
            raise WebhookError(response.status_code, errcode, str(fields.get("errmsg") or ""))

    async def _progress(self, chat_id: str, reply_to: str | None) -> None:
        """``progressText`` once per turn (the message it answers), best effort."""
        if not self._progress_text or self.routes.get(chat_id) is None:
            return
        key = f"{chat_id}:{reply_to}"
        if key in self._progress_shown:
            return
        self._progress_shown[key] = None
        while len(self._progress_shown) > _PROGRESS_KEEP:
            self._progress_shown.popitem(last=False)
        try:
            await self._deliver(chat_id, self._progress_text, plain=True)
        except (LucidError, WebhookError, OpenAPIError, httpx.HTTPError) as exc:
            logger.debug("DingTalk progress line not sent: %s", exc)
