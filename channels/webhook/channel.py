"""The HTTP webhook channel: its lifecycle, its routes and its gate, and where answers go
(DESIGN §2, §9). Holding a request open until its answer comes is ``channels.webhook.intake``.

Every route first checks ``Authorization: Bearer <channels.webhook.token>`` (constant-time;
an empty configured token turns the endpoint off with 503), then caps the body as it
streams in (``maxBodyBytes``; a chunked body cannot slip past a Content-Length check), and
only then lets FastAPI parse and validate it (unknown fields are refused).

A message is accepted once the bus has journalled it. With ``wait=true`` the answer comes
back in the response; if it takes longer than ``waitTimeoutS`` (or the client goes away)
the request gets 504 and the answer goes to ``callback_url`` when one was given. With
``wait=false`` the response is 202 at once and the answer is POSTed to ``callback_url``,
signed, from the gateway's durable outbox (``channels.outbox``, ``channels.webhook.callbacks``).

Credentials and roles (``channels.webhook.auth``): the bearer token is an integration
credential, never the owner (a sender listed in ``owners`` needs ``ownerToken``);
``adminToken`` reads every session, the integration token only the guest chats it wrote
to; and a chat belongs to the role (owner or guest) of its first sender —
the other role is refused with 403, so no session ever mixes roles. The role decided here
(``admit``) is stamped on the message. Requests that carry an
``idempotency_key`` or a ``callback_url`` are remembered in SQLite (``channels.webhook.store``), so
a retried request never runs a second turn and a restart loses no callback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import OutboundMessage, Role
from lucidgate.channels.webhook.api import (
    CHANNEL,
    MESSAGE_RESPONSES,
    SHUTTING_DOWN,
    MessageReply,
    MessageRequest,
    WebhookRateLimits,
    SessionsView,
    bearer_scheme,
    error_response,
    guarded_route,
)
from lucidgate.channels.webhook.auth import (
    ChatLedger,
    SETTING_OF,
    Credential,
    authorize,
    caller,
    owner_refusal,
    role_refusal,
    spender_of,
)
from lucidgate.channels.webhook.callbacks import (
    CallbackPoster,
    adopt_legacy_callbacks,
    check_callback_url,
)
from lucidgate.channels.webhook.chat_messages import RESPONSES as CHAT_RESPONSES
from lucidgate.channels.webhook.chat_messages import ChatMessages, chat_messages_route
from lucidgate.channels.outfiles import FileRoots, with_problems
from lucidgate.channels.webhook.files_out import callback_docs, encode_files
from lucidgate.channels.webhook.intake import MessageIntake
from lucidgate.channels.webhook.sessions_api import SessionsApi
from lucidgate.channels.webhook.sse import PreviewFeeds
from lucidgate.channels.webhook.store import RequestRecord, WebhookStore, callback_body
from lucidgate.config.schema import WebhookConfig

logger = logging.getLogger(__name__)


class WebhookChannel:
    name = CHANNEL

    def __init__(self, cfg: WebhookConfig, bus: MessageBus, *, workspace: Path,
                 store: WebhookStore | None = None, purge_interval_s: float = 3600.0,
                 max_text_chars: int | None = None, sessions: SessionsView | None = None) -> None:
        """``sessions``: the root's read-only transcript view, for the sessions API and a chat's
        messages (without one, as in a channel built alone, those routes answer 503)."""
        self.cfg = cfg
        # agents.defaults.maxMessageChars: a longer text is refused with 413 before it is
        # queued, rather than accepted and answered by a failed turn (502).
        self.max_text_chars = max_text_chars
        self.workspace = Path(workspace)
        # Expired idempotency records and old deliveries are dropped at start and then
        # hourly, so a gateway that runs for months keeps a small database.
        self.purge_interval_s = purge_interval_s
        self._purger: asyncio.Task[None] | None = None
        self.bus = bus
        self.store = store or WebhookStore(workspace / "state" / "webhook.sqlite")
        self.callbacks = CallbackPoster(
            secret=cfg.callback_secret.get_secret_value(), allow_hosts=cfg.callback_allow_hosts,
            timeout_s=cfg.callback_timeout_s, max_attempts=cfg.callback_max_attempts,
            backoff_s=cfg.callback_backoff_s)
        self.intake_limits = WebhookRateLimits.of(cfg)
        self.ledger = ChatLedger(workspace / "state" / "webhook_chats.sqlite")
        self.previews = PreviewFeeds(bus.live_readers)  # `stream: true` requests, by message id
        self.intake = MessageIntake(bus, self.store, self.previews, wait_timeout_s=cfg.wait_timeout_s)
        self._sessions = sessions

    # -- lifecycle ---------------------------------------------------------------------------
    def describe(self) -> str:
        if not self.cfg.token.get_secret_value():
            return "channels.webhook.token is empty — POST /v1/messages answers 503 until it is set"
        callbacks = "" if self.cfg.callback_secret.get_secret_value() else \
            " (callbacks off: channels.webhook.callbackSecret is empty)"
        return "enabled — POST /v1/messages" + callbacks

    def share_intake_limits(self, limits: WebhookRateLimits) -> None:
        """Count against ``limits`` (shared with the OpenAI endpoint) instead of our own."""
        self.intake_limits = limits

    @property
    def sessions_view(self) -> SessionsView | None:
        return self._sessions

    async def start(self) -> None:
        await asyncio.to_thread(self.store.open)
        await self._purge()
        await self.callbacks.start()
        self.bus.subscribe(self.name, self.send)
        self.bus.on_recorded(self.name, self._answered)
        await adopt_legacy_callbacks(self.store, self.bus)
        self._purger = asyncio.create_task(self._purge_periodically(), name="webhook-purge")

    async def _purge(self) -> None:
        try:
            purged = await asyncio.to_thread(self.store.purge)
        except Exception:  # maintenance must never take the channel down
            logger.exception("webhook: purging expired records failed")
            return
        if purged:
            logger.debug("webhook: purged %d expired records", purged)

    async def _purge_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.purge_interval_s)
            await self._purge()

    async def drain(self) -> None:
        """Shutdown: answer requests still waiting (their turns resume at next start); the
        callbacks still due stay in the outbox for the next start."""
        self.intake.release()

    async def stop(self) -> None:
        # Stay subscribed: the bus flushes last, and a late answer must still be recorded.
        self.intake.release()
        if self._purger is not None:
            self._purger.cancel()
            await asyncio.gather(self._purger, return_exceptions=True)
            self._purger = None
        await self.callbacks.stop()
        await self.store.aclose()
        await self.ledger.aclose()

    # -- outbound -----------------------------------------------------------------------------
    async def send(self, msg: OutboundMessage) -> None:
        if msg.kind == "progress":
            if msg.activity:
                self.previews.push(msg.target.reply_to, "activity", msg.activity)
            if msg.text:
                self.previews.push(msg.target.reply_to, "progress", msg.text)
            return
        if msg.kind not in ("text", "error"):
            return
        is_error = msg.kind == "error"
        reply_to = msg.in_reply_to  # type: ignore[union-attr]
        session = f"{CHANNEL}:{msg.target.chat_id}"
        if reply_to is None:
            url = await asyncio.to_thread(self.store.latest_callback, msg.target.chat_id)
            if url is None:
                logger.info("webhook: a message for chat %s has no callback to go to; the integration "
                            "reads it with GET /v1/chats/{chat_id}/messages", msg.target.chat_id)
                return
        else:
            # Recorded already when the answer became durable (``_answered``); an answer the
            # outbox replays after a restart comes straight here and is recorded now.
            record = await asyncio.to_thread(self.store.get, reply_to)
            if record is None or not record.done:
                record = await self._answered(msg)
            if record is None or not (record.want_callback and record.callback_url):
                return
            url, session = record.callback_url, record.session
        delivery_id = msg.delivery_id or uuid.uuid4().hex  # type: ignore[union-attr]
        text, files = msg.text, getattr(msg, "files", ())  # type: ignore[union-attr]
        encoded: list[dict[str, Any]] = []
        if files:
            roots = FileRoots(self.workspace, self.bus.agent_workspaces)
            encoded, problems = await asyncio.to_thread(encode_files, roots, files, getattr(msg, "agent", ""))
            text = with_problems(text, problems)
        body = callback_body(delivery_id=delivery_id, message_id=reply_to, session=session,
                             chat_id=msg.target.chat_id, reply=text, is_error=is_error, files=encoded)
        await self.callbacks.post(url, body.encode("utf-8"), delivery_id=delivery_id, message_id=reply_to)

    async def _answered(self, msg: OutboundMessage) -> RequestRecord | None:
        """Record the answer to a request and hand it to a client still waiting for it.

        Runs as soon as the answer is durable (``bus.on_recorded``), so a waiting request is
        answered even while an earlier callback of the same chat backs off in the lane."""
        reply_to = getattr(msg, "in_reply_to", None)
        if reply_to is None or msg.kind not in ("text", "error"):
            return None
        text, is_error = msg.text, msg.kind == "error"  # type: ignore[union-attr]
        record = await asyncio.to_thread(self.store.finish, reply_to, text, is_error)
        self.intake.answer(reply_to, text, is_error)
        return record

    # -- auth ---------------------------------------------------------------------------------
    def authorize(self, header: str | None) -> JSONResponse | None:
        return authorize(self.cfg, header)

    def caller_of(self, request: Request) -> tuple[Credential, str]:
        return caller(self.cfg, request.headers.get("authorization"))

    def admit(self, request: Request, sender_id: str) -> Role | Response:
        """The webhook's gate: the role a message from ``sender_id`` on this request runs as,
        or 403 when ``sender_id`` is an owner but the request lacks the owner credential.
        An owner is a sender listed in ``owners`` speaking with ``ownerToken``; anyone else is
        a guest."""
        if sender_id not in self.cfg.owner_ids():
            return "guest"
        if self.caller_of(request)[0] == "owner":
            return "owner"
        logger.warning("webhook: refused a message naming owner %r without the owner token", sender_id)
        return error_response(403, owner_refusal(sender_id))

    # -- routes -------------------------------------------------------------------------------
    def router(self) -> APIRouter:
        route_class = guarded_route(self.authorize, lambda: self.cfg.max_body_bytes)
        router = APIRouter(prefix="/v1", tags=["webhook"], route_class=route_class,
                           dependencies=[Security(bearer_scheme)])
        router.add_api_route(
            "/messages", self._post_message, methods=["POST"], response_model=MessageReply,
            summary="Send a message to the assistant",
            responses=MESSAGE_RESPONSES, callbacks=callback_docs())
        SessionsApi(self).register(router)
        router.add_api_route(
            "/chats/{chat_id}/messages", chat_messages_route(
                sessions=self._sessions, ledger=self.ledger, caller=self.caller_of,
                admin_configured=lambda: bool(self.cfg.admin_token.get_secret_value())),
            methods=["GET"], response_model=ChatMessages, responses=CHAT_RESPONSES,
            summary="What the assistant said in a chat after a position (reminders without a callback)")
        return router

    async def _post_message(self, body: MessageRequest, request: Request) -> Response:
        if not self.bus.accepting:
            return error_response(503, SHUTTING_DOWN)
        limited = self.intake_limits.take(self.caller_of(request)[1], body.sender_id)
        if limited is not None:
            wait_s, why = limited
            return error_response(429, why, headers={"Retry-After": str(max(1, math.ceil(wait_s)))})
        if body.stream and not body.wait:
            raise RequestValidationError([{"type": "value_error", "loc": ("body", "stream"),
                                           "msg": "stream=true needs wait=true (a 202 has nothing to stream)",
                                           "input": body.stream}])
        if self.max_text_chars is not None and len(body.text) > self.max_text_chars:
            return error_response(413, f"the text is {len(body.text):,} characters; the limit is "
                                       f"{self.max_text_chars:,} (agents.defaults.maxMessageChars): send it in parts")
        role = self.admit(request, body.sender_id)
        if isinstance(role, Response):
            return role
        kind, token_fp = self.caller_of(request)
        claimed = await asyncio.to_thread(self.ledger.claim, body.chat_id, role, token_fp)
        if claimed != role:
            logger.warning("webhook: refused a %s message into %s's chat %s", role, claimed, body.chat_id)
            return error_response(403, role_refusal(body.chat_id, claimed), session=f"{CHANNEL}:{body.chat_id}")
        if body.callback_url is not None:
            reason = await self._callback_refusal(body.callback_url)
            if reason is not None:
                raise RequestValidationError([{"type": "value_error", "loc": ("body", "callback_url"),
                                               "msg": reason, "input": body.callback_url}])
        return await self.intake.submit(request, body.chat_id, body.sender_id, body.text, role=role,
                                        idem_key=body.idempotency_key, callback_url=body.callback_url,
                                        wait=body.wait, stream=body.stream,
                                        spender=spender_of(SETTING_OF[kind]))

    async def _callback_refusal(self, url: str) -> str | None:
        if not self.cfg.callback_secret.get_secret_value():
            return "callbacks are off on this gateway: channels.webhook.callbackSecret is empty"
        return await check_callback_url(url, self.cfg.callback_allow_hosts)
