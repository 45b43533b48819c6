"""One webhook message in, its answer back: the part of the channel that holds open requests.

``submit`` remembers the request when it must survive a retry or a restart (an
``idempotency_key`` or a ``callback_url``), publishes the ``InboundMessage`` — with the role
the channel's checks decided — and then answers in one of three ways: 202 at once
(``wait=false``), the reply in the response (``wait=true``), or the reply as server-sent
events with previews on the way (``stream=true``). A waiting request that runs out of
``waitTimeoutS``, loses its client or meets the shutdown gets 504/503 saying where the
answer will go; the turn itself carries on.

Answers arrive through ``answer`` (the channel calls it once an answer is durable), which
wakes every request waiting on that message id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.messages import InboundMessage, Role
from lucidgate.channels.webhook.api import (
    CHANNEL,
    SHUTTING_DOWN,
    MessageAccepted,
    MessageReply,
    client_gone,
    error_response,
    reply_response,
    request_fingerprint,
)
from lucidgate.channels.webhook.sse import PreviewFeeds, event_stream
from lucidgate.channels.webhook.store import RequestRecord, WebhookStore

logger = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 2.0


class _Shutdown:
    """Sent to waiters when the gateway stops before their answer came."""


SHUTDOWN = _Shutdown()


class MessageIntake:
    """Publishes webhook messages and holds the requests that wait for their answers."""

    def __init__(self, bus: MessageBus, store: WebhookStore, previews: PreviewFeeds, *,
                 wait_timeout_s: float) -> None:
        self.bus = bus
        self.store = store
        self.previews = previews
        self.wait_timeout_s = wait_timeout_s
        self._waiters: dict[str, set[asyncio.Future[Any]]] = {}

    def answer(self, message_id: str, text: str, is_error: bool) -> None:
        """Hand an answer to every request still waiting for ``message_id``."""
        for fut in self._waiters.get(message_id, ()):
            if not fut.done():
                fut.set_result((text, is_error))

    def release(self) -> None:
        """Shutdown: every waiting request is answered now (its turn resumes at next start)."""
        for futures in self._waiters.values():
            for fut in futures:
                if not fut.done():
                    fut.set_result(SHUTDOWN)

    async def submit(self, request: Request, chat_id: str, sender_id: str, text: str, *, role: Role,
                     idem_key: str | None, callback_url: str | None, wait: bool,
                     stream: bool = False, spender: str | None = None, agent: str | None = None) -> Response:
        """``agent``: the id of the agent the message is for (a session of it is named); None:
        the bindings decide. Either way the answer's ``session`` is the key it lands in."""
        message_id = uuid.uuid4().hex
        msg = self.bus.routed(InboundMessage(channel=CHANNEL, chat_id=chat_id, sender_id=sender_id, text=text,
                                             chat_type="private", message_id=message_id, role=role,
                                             spender=spender), agent)
        session = msg.session_key
        fingerprint = request_fingerprint(chat_id, sender_id, text)
        remembered = idem_key is not None or callback_url is not None
        if remembered:
            record, created = await asyncio.to_thread(
                self.store.claim, message_id=message_id, idem_key=idem_key, fingerprint=fingerprint,
                session=session, chat_id=chat_id, sender_id=sender_id, callback_url=callback_url,
                want_callback=not wait)
            if not created:
                return await self._replay(request, record, fingerprint, wait)
        fut = self._add_waiter(message_id) if wait else None
        feed = self.previews.open(message_id) if stream else None  # before the turn can start
        try:
            await self.bus.publish_inbound(msg, timeout=PUBLISH_TIMEOUT_S)
        except BusClosed:
            self._drop_waiter(message_id, fut)
            if remembered:
                await asyncio.to_thread(self.store.forget, message_id)
            return error_response(503, SHUTTING_DOWN)
        except BusFull as exc:
            # Not accepted (the bus retracted it): the client retries with the same key.
            self._drop_waiter(message_id, fut)
            if remembered:
                await asyncio.to_thread(self.store.forget, message_id)
            return error_response(503, str(exc), headers={"Retry-After": "5"})
        if fut is None:
            return JSONResponse(MessageAccepted(session=session, message_id=message_id).model_dump(),
                                status_code=202)
        if feed is not None:
            return self._stream(fut, feed, message_id, session, remembered=remembered)
        return await self._wait(request, fut, message_id, session, remembered=remembered)

    def _stream(self, fut: asyncio.Future[Any], feed: asyncio.Queue[tuple[str, str]], message_id: str,
                session: str, *, remembered: bool) -> StreamingResponse:
        async def finish(answered: bool) -> tuple[str, dict[str, Any]]:
            if answered and fut.result() is not SHUTDOWN:
                text, is_error = fut.result()
                return "reply", MessageReply(reply=text, session=session, message_id=message_id,
                                             error=is_error).model_dump()
            late = await self._unanswered(message_id, session, remembered=remembered, shutdown=answered)
            if isinstance(late, JSONResponse):
                return "reply", json.loads(bytes(late.body))
            status, detail = late
            return "error", {"status": status, "detail": detail, "session": session, "message_id": message_id}

        def close() -> None:
            self.previews.close(message_id, feed)
            self._drop_waiter(message_id, fut)

        return StreamingResponse(
            event_stream(feed, fut, timeout_s=self.wait_timeout_s, finish=finish, close=close),
            media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _replay(self, request: Request, record: RequestRecord, fingerprint: str, wait: bool) -> Response:
        if record.fingerprint != fingerprint:
            return error_response(409, "this idempotency_key was already used for a different message in "
                                       "the last 24 hours", session=record.session, message_id=record.message_id)
        if record.done:
            return reply_response(record.reply or "", record.session, record.message_id, record.is_error)
        if not wait:
            return JSONResponse(MessageAccepted(session=record.session, message_id=record.message_id)
                                .model_dump(), status_code=202)
        fut = self._add_waiter(record.message_id)
        fresh = await asyncio.to_thread(self.store.get, record.message_id)
        if fresh is not None and fresh.done:
            self._drop_waiter(record.message_id, fut)
            return reply_response(fresh.reply or "", fresh.session, fresh.message_id, fresh.is_error)
        return await self._wait(request, fut, record.message_id, record.session, remembered=True)

    async def _wait(self, request: Request, fut: asyncio.Future[Any], message_id: str, session: str, *,
                    remembered: bool) -> Response:
        gone = asyncio.create_task(client_gone(request.receive), name=f"webhook-disconnect-{message_id}")
        try:
            done, _ = await asyncio.wait({fut, gone}, timeout=self.wait_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            self._drop_waiter(message_id, fut)
        if fut in done and fut.result() is not SHUTDOWN:
            text, is_error = fut.result()
            return reply_response(text, session, message_id, is_error)
        if gone in done:
            logger.info("webhook: client stopped waiting for %s; the turn carries on", message_id)
        late = await self._unanswered(message_id, session, remembered=remembered, shutdown=fut in done)
        if isinstance(late, JSONResponse):
            return late
        status, detail = late
        return error_response(status, detail, session=session, message_id=message_id)

    async def _unanswered(self, message_id: str, session: str, *, remembered: bool,
                          shutdown: bool) -> JSONResponse | tuple[int, str]:
        """No answer in time (or the shutdown drain): the reply if it just landed, else
        the status and the words that say where the answer will go."""
        record = await asyncio.to_thread(self.store.want_callback, message_id) if remembered else None
        if record is not None and record.done:
            return reply_response(record.reply or "", session, message_id, record.is_error)
        if record is not None and record.want_callback:
            later = "; its answer will be POSTed to callback_url"
        else:
            later = f"; read the answer with GET /v1/sessions/{session}"
        if shutdown:
            return 503, "the gateway is shutting down; your message is saved and will be answered after the restart" + later
        return 504, f"no answer within {self.wait_timeout_s:g}s; the message is queued" + later

    def _add_waiter(self, message_id: str) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(message_id, set()).add(fut)
        return fut

    def _drop_waiter(self, message_id: str, fut: asyncio.Future[Any] | None) -> None:
        futures = self._waiters.get(message_id)
        if futures is not None and fut is not None:
            futures.discard(fut)
            if not futures:
                del self._waiters[message_id]
