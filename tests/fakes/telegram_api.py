"""A fake Telegram Bot API on loopback, for the real python-telegram-bot to talk to.

The channel under test builds a real ``telegram.ext.Application`` with
``base_url=f"{fake.base_url}/bot"``, so requests, form encoding, response parsing and
PTB's error mapping (``RetryAfter``, ``BadRequest``, ``NetworkError``, ``TimedOut``) are all
exercised for real. The fake implements what the channel calls — ``getMe``,
``getUpdates`` (offset confirms, short long-poll), ``sendMessage`` (validates Telegram HTML
like the real server does), ``sendChatAction``, ``editMessageText``, ``setMyCommands``,
``deleteWebhook``, ``setWebhook``, ``getFile``, the file download route, and multipart
``sendDocument``/``sendPhoto`` uploads (their bytes in ``uploads``) — records every call, and can inject failures:

    async with FakeTelegramAPI() as tg:
        tg.push_message(chat_id=42, text="hi", sender_id=42)
        tg.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
        ...
        assert tg.calls_to("sendMessage")[0].params["parse_mode"] == "HTML"
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import socket
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from aiohttp import web

TOKEN = "123456789:AAH-fake_TOKEN-for-tests-0123456789"
BOT_ID = 777000111
BOT_USERNAME = "lucid_test_bot"

_ALLOWED_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre",
                 "span", "tg-spoiler", "blockquote", "tg-emoji"}
_TAG = re.compile(r"<(/?)([a-zA-Z-]+)([^>]*)>")


@dataclass
class Call:
    method: str
    params: dict[str, str]
    at: float = field(default_factory=time.monotonic)

    def json(self, key: str) -> Any:
        """A parameter PTB sent JSON-encoded (``reply_parameters``, ``commands``...)."""
        return json.loads(self.params[key])


@dataclass
class Fault:
    status: int
    description: str
    retry_after: int | None = None
    delay_s: float = 0.0  # respond late (after performing the call): a client-side timeout


def html_error(text: str) -> str | None:
    """What Telegram's HTML parser would reject (unknown or unbalanced tags, bare ``<``)."""
    stack: list[str] = []
    pos = 0
    for match in _TAG.finditer(text):
        if "<" in text[pos:match.start()]:
            return "Unsupported start tag"
        pos = match.end()
        closing, name = match.group(1), match.group(2).lower()
        if name not in _ALLOWED_TAGS:
            return f'Unsupported start tag "{name}"'
        if closing:
            if not stack or stack.pop() != name:
                return f'Unmatched end tag "{name}"'
        else:
            stack.append(name)
    if "<" in text[pos:]:
        return "Unsupported start tag"
    if stack:
        return f'Can\'t find end tag corresponding to start tag "{stack[-1]}"'
    return None


class FakeTelegramAPI:
    def __init__(self, *, token: str = TOKEN, max_poll_s: float = 0.5) -> None:
        self.token = token
        self.max_poll_s = max_poll_s
        self.bot_user = {"id": BOT_ID, "is_bot": True, "first_name": "Lucid", "username": BOT_USERNAME,
                         "can_join_groups": True, "can_read_all_group_messages": False,
                         "supports_inline_queries": False}
        self.calls: list[Call] = []
        self.updates: list[dict[str, Any]] = []
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}  # (chat, id) -> sent message
        self.uploads: dict[tuple[str, str], bytes] = {}  # (chat_id, file name) -> uploaded bytes
        self.faults: dict[str, collections.deque[Fault]] = collections.defaultdict(collections.deque)
        self.hang_get_updates = False
        # A switchable outage of the send methods (chaos): "500", "429" or "hang", or None.
        self.outage: str | None = None
        self.outage_methods: frozenset[str] = frozenset({"sendMessage", "editMessageText", "sendDocument",
                                                         "sendPhoto"})
        self.outage_retry_after = 1
        self._outage_over = asyncio.Event()
        self.on_call: list[Callable[[Call], None]] = []  # observers run as each call arrives
        self._next_update = 1000
        self._next_message = 5000
        self._next_file = 1
        self._changed = asyncio.Event()  # set and replaced on every call or queued update
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # -- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> FakeTelegramAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- scripting -----------------------------------------------------------------------
    def fail(self, method: str, status: int, description: str, *, retry_after: int | None = None,
             times: int = 1, delay_s: float = 0.0) -> None:
        for _ in range(times):
            self.faults[method].append(Fault(status, description, retry_after, delay_s))

    def set_outage(self, mode: str | None, *, retry_after: int = 1) -> None:
        """Switch an outage on ("500", "429" with ``retry_after``, "hang") or off (None).

        During an outage the send methods are *not performed*; a hanging call is answered
        (with a 500) only when the outage ends, so the client times out first.
        """
        if mode not in (None, "500", "429", "hang"):
            raise ValueError(f"unknown outage mode {mode!r}")
        self.outage, self.outage_retry_after = mode, retry_after
        if mode is None:
            self._outage_over.set()
        else:
            self._outage_over = asyncio.Event()

    def delay(self, method: str, seconds: float, *, times: int = 1) -> None:
        """Perform the next call(s) but answer only after ``seconds`` (the client times out)."""
        for _ in range(times):
            self.faults[method].append(Fault(200, "", None, seconds))

    def push_update(self, update: dict[str, Any]) -> int:
        if "update_id" not in update:
            update["update_id"] = self._next_update
            self._next_update += 1
        self.updates.append(update)
        self._notify()
        return int(update["update_id"])

    def push_message(self, *, chat_id: int, text: str | None = None, sender_id: int | None = None,
                     username: str | None = None, chat_type: str = "private",
                     message_id: int | None = None, update_id: int | None = None,
                     reply_to_bot: bool = False, caption: str | None = None,
                     **extra: Any) -> dict[str, Any]:
        """Queue a ``message`` update shaped like Telegram's (entities computed like Telegram)."""
        sender_id = sender_id if sender_id is not None else chat_id
        if message_id is None:
            message_id = self._next_message
            self._next_message += 1
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = "Ann"
        else:
            chat["title"] = "A group"
        message: dict[str, Any] = {
            "message_id": message_id, "date": int(time.time()), "chat": chat,
            "from": {"id": sender_id, "is_bot": False, "first_name": "Ann", "last_name": "Example",
                     **({"username": username} if username else {})},
        }
        if text is not None:
            message["text"] = text
            if entities := _entities(text):
                message["entities"] = entities
        if caption is not None:
            message["caption"] = caption
            if entities := _entities(caption):
                message["caption_entities"] = entities
        if reply_to_bot:
            message["reply_to_message"] = {"message_id": 1, "date": int(time.time()), "chat": chat,
                                           "from": self.bot_user, "text": "earlier answer"}
        message.update(extra)
        update: dict[str, Any] = {"message": message}
        if update_id is not None:
            update["update_id"] = update_id
        self.push_update(update)
        return update

    def push_press(self, *, chat_id: int, sender_id: int, data: str, message_id: int = 1) -> dict[str, Any]:
        """Queue a ``callback_query`` update: ``sender_id`` pressed an inline button carrying
        ``data`` under message ``message_id`` in ``chat_id``."""
        chat: dict[str, Any] = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"}
        presser = {"id": sender_id, "is_bot": False, "first_name": "Ann"}
        query = {"id": f"cq{self._next_update}", "from": presser, "chat_instance": f"ci{chat_id}", "data": data,
                 "message": {"message_id": message_id, "date": int(time.time()), "chat": chat,
                             "from": self.bot_user, "text": "a message with buttons"}}
        update: dict[str, Any] = {"callback_query": query}
        self.push_update(update)
        return update

    def add_file(self, content: bytes, *, file_path: str, size: int | None = None) -> dict[str, Any]:
        """Register a downloadable file; returns the ``file_id``/``file_unique_id``/``file_size`` fields."""
        n = self._next_file
        self._next_file += 1
        meta = {"file_id": f"FILEID{n}", "file_unique_id": f"uniq{n}",
                "file_size": size if size is not None else len(content)}
        self.files[meta["file_id"]] = ({**meta, "file_path": file_path}, content)
        return meta

    # -- inspection ----------------------------------------------------------------------
    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, method: str, count: int = 1, timeout: float = 60.0) -> list[Call]:
        """Wait until ``count`` calls to ``method`` have been recorded."""
        async def reached() -> None:
            while len(self.calls_to(method)) < count:
                await self._changed.wait()

        await asyncio.wait_for(reached(), timeout)
        return self.calls_to(method)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- HTTP ----------------------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        form = await request.post()
        params = {k: str(v) for k, v in form.items() if not isinstance(v, web.FileField)}
        for v in form.values():
            if isinstance(v, web.FileField):
                params["upload"] = v.filename
                self.uploads[(params.get("chat_id", ""), v.filename)] = v.file.read()
        call = Call(method, params)
        self.calls.append(call)
        for observer in self.on_call:
            observer(call)
        self._notify()
        if self.outage is not None and method in self.outage_methods:
            if self.outage == "hang":
                await self._outage_over.wait()
                return _error(500, "Internal Server Error")
            if self.outage == "429":
                return _error(429, f"Too Many Requests: retry after {self.outage_retry_after}",
                              self.outage_retry_after)
            return _error(500, "Internal Server Error")
        fault = self.faults[method].popleft() if self.faults[method] else None
        if fault is not None and fault.status != 200:
            await asyncio.sleep(fault.delay_s)
            return _error(fault.status, fault.description, fault.retry_after)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return _error(404, "Not Found: method not found")
        response: web.Response = await handler(params)
        if fault is not None:
            await asyncio.sleep(fault.delay_s)
        return response

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        for meta, content in self.files.values():
            if meta["file_path"] == request.match_info["path"]:
                return web.Response(body=content)
        return web.Response(status=404)

    async def _m_getMe(self, params: dict[str, str]) -> web.Response:
        return _ok(self.bot_user)

    async def _m_getUpdates(self, params: dict[str, str]) -> web.Response:
        if self.hang_get_updates:
            await asyncio.sleep(3600)
        offset = int(params["offset"]) if params.get("offset") else None
        if offset is not None:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]  # confirmed
        wait = min(float(params.get("timeout") or 0), self.max_poll_s)
        deadline = time.monotonic() + wait
        while not self.updates and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                break
        limit = int(params.get("limit") or 100)
        return _ok(self.updates[:limit])

    async def _m_sendMessage(self, params: dict[str, str]) -> web.Response:
        text = params.get("text", "")
        if not text.strip():
            return _error(400, "Bad Request: message text is empty")
        if len(text) > 4096:
            return _error(400, "Bad Request: message is too long")
        if params.get("parse_mode") == "HTML" and (problem := html_error(text)):
            return _error(400, f"Bad Request: can't parse entities: {problem}")
        chat_id = int(params["chat_id"])
        message = {"message_id": self._next_message, "date": int(time.time()),
                   "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
                   "from": self.bot_user, "text": text}
        self._next_message += 1
        self.messages[(chat_id, message["message_id"])] = message
        return _ok(message)

    async def _m_sendDocument(self, params: dict[str, str]) -> web.Response:
        return self._sent_file(params, "document")

    async def _m_sendPhoto(self, params: dict[str, str]) -> web.Response:
        return self._sent_file(params, "photo")

    def _sent_file(self, params: dict[str, str], kind: str) -> web.Response:
        if "upload" not in params:
            return _error(400, f"Bad Request: there is no {kind} in the request")
        chat_id = int(params["chat_id"])
        file = {"file_id": f"up{self._next_file}", "file_unique_id": f"u{self._next_file}", "file_size": 1}
        self._next_file += 1
        message = {"message_id": self._next_message, "date": int(time.time()),
                   "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
                   "from": self.bot_user,
                   kind: [{**file, "width": 1, "height": 1}] if kind == "photo" else {**file, "file_name": params["upload"]}}
        self._next_message += 1
        self.messages[(chat_id, message["message_id"])] = message
        return _ok(message)

    async def _m_editMessageText(self, params: dict[str, str]) -> web.Response:
        key = (int(params["chat_id"]), int(params["message_id"]))
        message = self.messages.get(key)
        if message is None:
            return _error(400, "Bad Request: message to edit not found")
        text = params.get("text", "")
        if params.get("parse_mode") == "HTML" and (problem := html_error(text)):
            return _error(400, f"Bad Request: can't parse entities: {problem}")
        if text == message["text"]:
            return _error(400, "Bad Request: message is not modified")
        message["text"] = text
        return _ok({**message, "edit_date": int(time.time())})

    async def _m_getFile(self, params: dict[str, str]) -> web.Response:
        entry = self.files.get(params.get("file_id", ""))
        if entry is None:
            return _error(400, "Bad Request: invalid file_id")
        meta = entry[0]
        if meta["file_size"] > 20 * 1024 * 1024:
            return _error(400, "Bad Request: file is too big")
        return _ok(meta)

    async def _m_answerCallbackQuery(self, params: dict[str, str]) -> web.Response:
        return _ok(True)

    async def _m_sendChatAction(self, params: dict[str, str]) -> web.Response:
        return _ok(True)

    async def _m_setMyCommands(self, params: dict[str, str]) -> web.Response:
        return _ok(True)

    async def _m_deleteWebhook(self, params: dict[str, str]) -> web.Response:
        return _ok(True)

    async def _m_setWebhook(self, params: dict[str, str]) -> web.Response:
        return _ok(True)


def _entities(text: str) -> list[dict[str, Any]]:
    """Mentions and a leading command, as Telegram marks them (ASCII texts: offsets = indexes)."""
    entities = []
    command = re.match(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?", text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": command.end()})
    for match in re.finditer(r"(?<![\w/])@[A-Za-z0-9_]{5,32}", text):
        entities.append({"type": "mention", "offset": match.start(), "length": match.end() - match.start()})
    return entities


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)
