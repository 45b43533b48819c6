"""The Telegram channel: the real python-telegram-bot against a loopback fake Bot API.

Every test drives a real ``telegram.ext.Application`` (through ``TelegramChannel``) and a
real ``MessageBus`` with an ``InboxJournal``; assertions are on what reached the bus and on
the exact Bot API calls the fake recorded.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryUncertain, OutboundLimiter, Verdict
from lucidgate.channels.base import ChannelUnavailable, CommandSpec
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, OutboundError, OutboundProgress, OutboundText, OutboundTyping, Target
from lucidgate.channels.pairing import PairingStore, default_path
from lucidgate.channels.routing import Router
from lucidgate.channels.telegram import TelegramChannel, TelegramSettings, build
from lucidgate.channels.telegram.format import menu_commands
from lucidgate.channels.telegram.markdown import html_to_plain, markdown_to_html, render, split_plain
from lucidgate.channels.telegram.send import classify
from lucidgate.config.errors import ConfigError
from tests.channel_kit import deps_at
from tests.fakes.telegram_api import BOT_USERNAME, TOKEN, FakeTelegramAPI, html_error
from tests.served import served_client
from tests.waiting import until

OWNER = 42
COMMANDS = (CommandSpec("help", "list commands"), CommandSpec("new", "start fresh"),
            CommandSpec("dream-log", "list memory changes", owner_only=True),
            CommandSpec("forget", "remove lines from memory", owner_only=True))
REFUSAL = "Sorry, I only talk to people my owner has allowed."


@pytest_asyncio.fixture
async def tg() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as fake:
        yield fake


@pytest_asyncio.fixture
async def bus(workspace: Path) -> AsyncIterator[MessageBus]:
    bus = MessageBus(inbox=InboxJournal(workspace / "inbox.jsonl"))
    await bus.start()
    yield bus
    await bus.stop()


def fast_limiter() -> OutboundLimiter:
    return OutboundLimiter("telegram", classify, rate_per_s=1000, burst=1000, per_key_rate_per_s=1000,
                           per_key_burst=1000, backoff_s=0.05)


MakeChannel = Callable[..., Awaitable[TelegramChannel]]


@pytest_asyncio.fixture
async def make_channel(make_config: Any, workspace: Path, tg: FakeTelegramAPI,
                       bus: MessageBus) -> AsyncIterator[MakeChannel]:
    started: list[TelegramChannel] = []

    async def build(*, cfg: dict[str, Any] | None = None, bus_: MessageBus | None = None,
                    **kwargs: Any) -> TelegramChannel:
        """``cfg``: overrides of the camelCase config section; ``kwargs``: constructor tuning."""
        section = {"enabled": True, "token": TOKEN, "apiBase": tg.base_url, "allowFrom": [str(OWNER), "@carol"],
                   "owners": [str(OWNER)], "pollTimeoutS": 1, "watchdogS": 60, **(cfg or {})}
        limiter = kwargs.pop("limiter", fast_limiter())
        commands = kwargs.pop("commands", COMMANDS)
        kwargs.setdefault("retry_base_s", 0.02)
        kwargs.setdefault("request_timeout_s", 3.0)
        config = make_config(channels={"telegram": section})
        settings = TelegramSettings.from_section(config.channels.telegram, **kwargs)
        channel = TelegramChannel(settings, bus_ or bus, workspace=workspace, limiter=limiter, commands=commands)
        started.append(channel)
        await channel.start()
        return channel

    yield build
    for channel in started:
        await channel.stop()


async def next_inbound(bus: MessageBus, timeout: float = 30.0, *, agent: str = "") -> InboundMessage:
    delivery = await asyncio.wait_for(bus.consume_inbound(agent), timeout)
    await bus.ack(delivery)
    return delivery.msg



async def settled(channel: TelegramChannel, update: dict[str, Any]) -> None:
    """The channel has acknowledged (persisted the offset of) ``update``."""
    await until(lambda: channel.last_update_id is not None and channel.last_update_id >= update["update_id"])


def target(chat: int | str = OWNER, reply_to: str | None = "5000") -> Target:
    return Target("telegram", str(chat), None, reply_to)


# ----------------------------------------------------------------------------- intake


async def test_private_text_becomes_inbound_message_and_start_registers_commands(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    assert [c.method for c in tg.calls[:3]] == ["getMe", "setMyCommands", "deleteWebhook"]
    menu = [(c["command"], c["description"]) for c in tg.calls_to("setMyCommands")[0].json("commands")]
    assert menu == [("help", "List commands"), ("new", "Start fresh"), ("dream_log", "List memory changes"),
                    ("forget", "Remove lines from memory")]

    update = tg.push_message(chat_id=OWNER, text="hello there", message_id=5000)
    msg = await next_inbound(bus)
    assert msg == InboundMessage(channel="telegram", chat_id="42", sender_id="42", text="hello there",
                                 chat_type="private", message_id="5000", sender_name="Ann Example", role="owner",
                                 account=BOT_USERNAME)  # the bot it came to: what bindings' `account` names
    assert msg.session_key == "telegram:42"
    await settled(channel, update)
    polls = tg.calls_to("getUpdates")
    assert polls[0].json("allowed_updates") == ["message", "callback_query"]  # presses of our buttons
    await tg.wait_for("getUpdates", len(polls) + 1)
    assert tg.calls_to("getUpdates")[-1].params["offset"] == str(update["update_id"] + 1)
    state = json.loads((channel.workspace / "state" / "telegram.json").read_text())
    assert state == {"last_update_id": update["update_id"]}


async def test_a_binding_by_account_routes_this_bots_messages_and_presses_to_its_agent(
        make_channel: MakeChannel, make_config: Any, tg: FakeTelegramAPI, tmp_path: Path) -> None:
    """Issue 41: ``{"match": {"channel": "telegram", "account": <bot username>}}`` sends what
    this bot receives (a message, a button press) to "work"; a binding naming another bot does not."""
    config = make_config(
        agents={"list": [{"id": "home", "workspace": str(tmp_path / "home")},
                         {"id": "work", "workspace": str(tmp_path / "work")},
                         {"id": "spare", "workspace": str(tmp_path / "spare")}]},
        bindings=[{"agent": "spare", "match": {"channel": "telegram", "account": "some_other_bot"}},
                  {"agent": "work", "match": {"channel": "telegram", "account": BOT_USERNAME}}])
    routed = MessageBus(inbox=InboxJournal(tmp_path / "inbox.jsonl"), router=Router(config))
    await routed.start()
    try:
        await make_channel(bus_=routed)
        tg.push_message(chat_id=OWNER, text="for work", message_id=6001)
        msg = await next_inbound(routed, agent="work")
        assert (msg.text, msg.account, msg.agent, msg.session_key) == (
            "for work", BOT_USERNAME, "work", f"work:telegram:{OWNER}")
        tg.push_press(chat_id=OWNER, sender_id=OWNER, data="/help")
        press = await next_inbound(routed, agent="work")
        assert (press.text, press.account, press.agent) == ("/help", BOT_USERNAME, "work")
        assert routed.inbound_depth == 0  # nothing went to home or spare
    finally:
        await routed.stop()


async def test_offset_acknowledges_only_after_the_message_is_journalled(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus, workspace: Path) -> None:
    journal_at_ack: list[str] = []
    pending: dict[str, int] = {}

    def on_call(call: Any) -> None:
        if call.method == "getUpdates" and call.params.get("offset") == str(pending.get("ack")):
            journal_at_ack.append((workspace / "inbox.jsonl").read_text())

    tg.on_call.append(on_call)
    await make_channel()
    update = tg.push_message(chat_id=OWNER, text="durable words")
    pending["ack"] = update["update_id"] + 1
    await until(lambda: bool(journal_at_ack))
    assert "durable words" in journal_at_ack[0]
    assert bus.inbound_depth == 1


async def test_group_messages_need_a_mention_reply_or_command(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    group = -100123
    ignored = [
        tg.push_message(chat_id=group, chat_type="supergroup", sender_id=OWNER, text="just chatting"),
        tg.push_message(chat_id=group, chat_type="supergroup", sender_id=OWNER, text="hey @someone_else ok"),
        tg.push_message(chat_id=group, chat_type="group", sender_id=OWNER, text="/help@other_bot"),
    ]
    await settled(channel, ignored[-1])
    assert bus.inbound_depth == 0

    tg.push_message(chat_id=group, chat_type="supergroup", sender_id=OWNER, text=f"@{BOT_USERNAME} what's up?")
    mentioned = await next_inbound(bus)
    assert (mentioned.text, mentioned.chat_type, mentioned.chat_id) == ("what's up?", "group", str(group))
    assert mentioned.session_key == f"telegram:{group}"

    tg.push_message(chat_id=group, chat_type="supergroup", sender_id=OWNER, text="and this?", reply_to_bot=True)
    assert (await next_inbound(bus)).text == "and this?"

    tg.push_message(chat_id=group, chat_type="group", sender_id=OWNER, text=f"/dream_log@{BOT_USERNAME}")
    assert (await next_inbound(bus)).text == "/dream_log"
    # An allowed group member is still refused nothing; a stranger mentioning the bot is refused.
    stranger = tg.push_message(chat_id=group, chat_type="supergroup", sender_id=666, text=f"hi @{BOT_USERNAME}")
    await settled(channel, stranger)
    await bus.flush_outbound()
    assert bus.inbound_depth == 0
    assert [c.params["text"] for c in tg.calls_to("sendMessage")] == [REFUSAL]


async def test_commands_pass_through_and_start_means_help(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    await make_channel()
    tg.push_message(chat_id=OWNER, text="/start")
    tg.push_message(chat_id=OWNER, text=f"/help@{BOT_USERNAME}")
    tg.push_message(chat_id=OWNER, text="/dream_log")
    tg.push_message(chat_id=OWNER, text=f"/new@{BOT_USERNAME.upper()} please")
    texts = [(await next_inbound(bus)).text for _ in range(4)]
    assert texts == ["/help", "/help", "/dream_log", "/new please"]


async def test_duplicate_updates_are_processed_once(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    first = tg.push_message(chat_id=OWNER, text="once", message_id=7001)
    tg.push_update(json.loads(json.dumps(first)))  # the same update_id again
    again = tg.push_message(chat_id=OWNER, text="once", message_id=7001)  # redelivered under a new id
    await settled(channel, again)
    assert (await next_inbound(bus)).text == "once"
    assert bus.inbound_depth == 0


async def test_restart_resumes_from_the_persisted_offset(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus, workspace: Path) -> None:
    channel = await make_channel()
    old = tg.push_message(chat_id=OWNER, text="before restart", message_id=8001)
    assert (await next_inbound(bus)).text == "before restart"
    await settled(channel, old)
    await channel.stop()
    await bus.stop()

    # Telegram still holds the old update (as if it had never seen the acknowledging call).
    tg.push_update(json.loads(json.dumps(old)))
    tg.push_message(chat_id=OWNER, text="before restart", message_id=8001)  # redelivery, new update_id
    tg.push_message(chat_id=OWNER, text="after restart", message_id=8002)
    calls_before = len(tg.calls_to("getUpdates"))

    bus2 = MessageBus(inbox=InboxJournal(workspace / "inbox.jsonl"))
    await bus2.start()
    try:
        assert bus2.inbound_depth == 0  # the first run's message was acked: nothing to replay
        await make_channel(bus_=bus2)
        await tg.wait_for("getUpdates", calls_before + 1)
        assert tg.calls_to("getUpdates")[calls_before].params["offset"] == str(old["update_id"] + 1)
        assert (await next_inbound(bus2)).text == "after restart"
        polls = len(tg.calls_to("getUpdates"))
        await tg.wait_for("getUpdates", polls + 1)  # the batch after it was handled in full
        assert bus2.inbound_depth == 0
    finally:
        await bus2.stop()


async def test_photo_document_and_voice_are_downloaded_into_the_workspace(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus, workspace: Path) -> None:
    await make_channel()
    small = tg.add_file(b"\x89PNG-small", file_path="photos/s.jpg")
    large = tg.add_file(b"\x89PNG-large-version", file_path="photos/l.jpg")
    photo = [{**small, "width": 90, "height": 90}, {**large, "width": 800, "height": 600}]
    tg.push_message(chat_id=OWNER, caption="look at this", photo=photo)
    msg = await next_inbound(bus)
    rel = f"media/telegram/42/{large['file_unique_id']}.jpg"
    assert msg.text == f"[image: {rel}]\nlook at this"
    assert msg.media == (rel,)
    assert (workspace / rel).read_bytes() == b"\x89PNG-large-version"

    doc = tg.add_file(b"%PDF-1.7 report", file_path="documents/r.pdf")
    tg.push_message(chat_id=OWNER, document={**doc, "file_name": "Report.PDF", "mime_type": "application/pdf"})
    msg = await next_inbound(bus)
    assert msg.media == (f"media/telegram/42/{doc['file_unique_id']}.pdf",)
    assert (workspace / msg.media[0]).read_bytes() == b"%PDF-1.7 report"

    voice = tg.add_file(b"OggS-voice", file_path="voice/v.oga")
    tg.push_message(chat_id=OWNER, voice={**voice, "duration": 3, "mime_type": "audio/ogg"})
    msg = await next_inbound(bus)
    assert msg.text == f"[voice: media/telegram/42/{voice['file_unique_id']}.ogg]"


async def test_files_over_20_mb_are_refused_without_downloading(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus, workspace: Path) -> None:
    await make_channel()
    huge = tg.add_file(b"x", file_path="documents/huge.zip", size=25 * 1024 * 1024)
    tg.push_message(chat_id=OWNER, caption="backup", document={**huge, "file_name": "huge.zip"})
    msg = await next_inbound(bus)
    assert msg.media == ()
    assert "over the 20 MB limit" in msg.text and msg.text.endswith("backup")
    assert tg.calls_to("getFile") == []
    assert not (workspace / "media").exists()


async def test_failed_download_still_delivers_the_message(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    await make_channel()
    missing = {"file_id": "NOPE", "file_unique_id": "gone1", "file_size": 10}
    tg.push_message(chat_id=OWNER, caption="what is this", document={**missing, "mime_type": "application/pdf"})
    msg = await next_inbound(bus)
    assert msg.media == ()
    assert msg.text == "[file could not be downloaded]\nwhat is this"
    assert len(tg.calls_to("getFile")) == 1


async def test_a_closed_bus_leaves_the_update_unacknowledged(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus, workspace: Path) -> None:
    channel = await make_channel(cfg={"watchdogS": 0.8})  # the fake long-polls 0.5 s at most
    first = tg.push_message(chat_id=OWNER, text="accepted")
    assert (await next_inbound(bus)).text == "accepted"
    await settled(channel, first)
    bus.close_intake()  # the gateway is shutting down
    tg.push_message(chat_id=OWNER, text="arrives during shutdown")
    await until(lambda: channel._tasks["poll"].done())
    await until(lambda: channel._tasks["watchdog"].done())  # no restart of a deliberate stop
    assert channel.poll_restarts == 0
    assert channel.last_update_id == first["update_id"]
    state = json.loads((workspace / "state" / "telegram.json").read_text())
    assert state["last_update_id"] == first["update_id"]  # Telegram will redeliver the second


async def test_unknown_sender_gets_one_refusal_and_nothing_reaches_the_bus(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    tg.push_message(chat_id=666, text="let me in", message_id=9001)
    last = tg.push_message(chat_id=666, text="please?", message_id=9002)
    await settled(channel, last)
    await bus.flush_outbound()  # the refusal leaves through the outbound queue, like any reply
    sends = tg.calls_to("sendMessage")
    assert len(sends) == 1
    assert sends[0].params["text"] == REFUSAL and sends[0].params["chat_id"] == "666"
    assert "parse_mode" not in sends[0].params
    assert sends[0].json("reply_parameters")["message_id"] == 9001
    assert bus.inbound_depth == 0

    tg.push_message(chat_id=555, text="hi", username="Carol")  # allowed by @username, any case
    assert (await next_inbound(bus)).sender_id == "555"


async def test_a_long_rate_limit_on_a_refusal_never_stalls_intake(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    tg.fail("sendMessage", 429, "Too Many Requests: retry after 250", retry_after=250)
    tg.push_message(chat_id=666, text="let me in", message_id=9001)
    await tg.wait_for("sendMessage", 1)  # the refusal met a 250 s flood wait…
    tg.push_message(chat_id=OWNER, text="still there?")
    assert (await next_inbound(bus, timeout=30)).text == "still there?"  # …and intake went on
    assert channel.limiter.waits == [250] and len(tg.calls_to("sendMessage")) == 1
    bus.unsubscribe("telegram")  # drop the refusal still waiting out its 250 s


async def test_refusal_none_means_silence(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                          bus: MessageBus) -> None:
    channel = await make_channel(cfg={"refusal": None})
    update = tg.push_message(chat_id=666, text="hello?")
    await settled(channel, update)
    await bus.flush_outbound()
    assert tg.calls_to("sendMessage") == []
    assert bus.inbound_depth == 0


async def test_pairing_code_in_refusal_and_approval_lets_the_sender_in(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus, workspace: Path) -> None:
    channel = await make_channel(cfg={"pairing": True})
    update = tg.push_message(chat_id=666, text="hi")
    await settled(channel, update)
    await bus.flush_outbound()
    (refusal,) = tg.calls_to("sendMessage")
    store = PairingStore(default_path(workspace))
    (pending,) = store.pending("telegram")
    assert pending["sender_id"] == "666"
    assert pending["code"] in refusal.params["text"] and refusal.params["text"].startswith(REFUSAL)
    assert store.approve(pending["code"]) == ("telegram", "666")

    tg.push_message(chat_id=666, text="thanks!")
    msg = await next_inbound(bus)
    assert (msg.sender_id, msg.text) == ("666", "thanks!")
    assert not channel.is_owner("666") and channel.is_owner(str(OWNER))


# ----------------------------------------------------------------------------- replies


async def typing_refreshed(channel: TelegramChannel, tg: FakeTelegramAPI, bus: MessageBus) -> asyncio.Task[None]:
    """Start the indicator and see it refreshed; its refresh task, still running."""
    await bus.publish_outbound(OutboundTyping(target()))
    await tg.wait_for("sendChatAction", 3)
    typing = channel.sender.typing.task(target())
    assert typing is not None and not typing.done()
    return typing


async def test_typing_is_refreshed_until_the_reply_is_sent(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel(typing_refresh_s=0.1)
    typing = await typing_refreshed(channel, tg, bus)
    await bus.publish_outbound(OutboundText(target(), "**Done** & dusted <ok>", in_reply_to="5000"))
    await bus.flush_outbound()
    actions = tg.calls_to("sendChatAction")
    assert {(c.params["chat_id"], c.params["action"]) for c in actions} == {("42", "typing")}
    (sent,) = tg.calls_to("sendMessage")
    assert sent.params["text"] == "<b>Done</b> &amp; dusted &lt;ok&gt;"
    assert sent.params["parse_mode"] == "HTML"
    assert sent.json("reply_parameters") == {"message_id": 5000, "allow_sending_without_reply": True}
    # The reply ended the refresh loop itself: nothing is left that could send another action.
    await asyncio.gather(typing, return_exceptions=True)
    assert typing.cancelled() and channel.sender.typing.task(target()) is None


async def test_an_error_reply_ends_the_typing_indicator_too(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel(typing_refresh_s=0.1)
    typing = await typing_refreshed(channel, tg, bus)
    await bus.publish_outbound(OutboundError(target(), "The model is unreachable."))
    await bus.flush_outbound()
    await asyncio.gather(typing, return_exceptions=True)
    assert typing.cancelled() and channel.sender.typing.task(target()) is None
    (sent,) = tg.calls_to("sendMessage")
    assert "The model is unreachable." in sent.params["text"]


async def test_typing_stops_at_its_cap(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                       bus: MessageBus) -> None:
    channel = await make_channel(typing_refresh_s=0.05, typing_max_s=0.2)
    await bus.publish_outbound(OutboundTyping(target()))
    await bus.flush_outbound()
    typing = channel.sender.typing.task(target())
    assert typing is not None
    await asyncio.wait_for(typing, 30)  # the loop ends by itself at the cap, with no reply
    assert not typing.cancelled() and channel.sender.typing.task(target()) is None
    # One action at once, then at most one per refresh within the cap (fewer on a slow machine).
    assert 1 <= len(tg.calls_to("sendChatAction")) <= 1 + round(0.2 / 0.05)


async def test_long_reply_is_split_into_valid_html_chunks(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    await make_channel()
    prose = "\n\n".join(f"Paragraph {i} with **bold** words & more text." * 3 for i in range(40))
    code = "\n".join(f"line_{i} = compute({i}) < {i + 1}" for i in range(300))
    text = f"{prose}\n\n```python\n{code}\n```\n\nThe *end*."
    await bus.publish_outbound(OutboundText(target(), text, in_reply_to="5000"))
    await bus.flush_outbound()
    sends = tg.calls_to("sendMessage")
    assert len(sends) >= 3
    assert all(len(c.params["text"]) <= 4096 for c in sends)
    assert all(c.params["parse_mode"] == "HTML" and html_error(c.params["text"]) is None for c in sends)
    assert "reply_parameters" in sends[0].params
    assert all("reply_parameters" not in c.params for c in sends[1:])
    shown = "\n".join(html_to_plain(c.params["text"]) for c in sends)
    assert "Paragraph 39" in shown and "line_299 = compute(299) < 300" in shown and shown.endswith("The end.")
    pre_chunks = [c.params["text"] for c in sends if "<pre>" in c.params["text"]]
    assert len(pre_chunks) >= 2  # the code block was longer than a message: closed and reopened
    assert all(chunk.count("<pre>") == chunk.count("</pre>") for chunk in pre_chunks)


async def test_rejected_html_is_resent_as_plain_text(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                                     bus: MessageBus) -> None:
    await make_channel()
    tg.fail("sendMessage", 400, "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 3")
    await bus.publish_outbound(OutboundText(target(), "Use **this** & that"))
    await bus.flush_outbound()
    first, second = tg.calls_to("sendMessage")
    assert first.params["parse_mode"] == "HTML"
    assert "parse_mode" not in second.params
    assert second.params["text"] == "Use this & that"
    assert second.json("reply_parameters")["message_id"] == 5000


async def test_other_bad_requests_are_not_retried(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                                  bus: MessageBus, caplog: pytest.LogCaptureFixture) -> None:
    await make_channel()
    tg.fail("sendMessage", 400, "Bad Request: chat not found")
    await bus.publish_outbound(OutboundError(target(chat=31337), "Something went wrong."))
    await bus.flush_outbound()
    assert len(tg.calls_to("sendMessage")) == 1
    assert "Chat not found" in caplog.text


async def test_retry_after_is_honoured(make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    tg.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    await bus.publish_outbound(OutboundText(target(), "patience"))
    await bus.flush_outbound()
    first, second = tg.calls_to("sendMessage")
    assert second.params["text"] == first.params["text"] == "patience"
    assert second.at - first.at >= 0.95
    assert channel.limiter.waits == [1.0]


async def test_server_errors_are_retried_with_backoff(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                                      bus: MessageBus) -> None:
    await make_channel()
    tg.fail("sendMessage", 500, "Internal Server Error", times=2)
    await bus.publish_outbound(OutboundText(target(), "eventually"))
    await bus.flush_outbound()
    assert [c.params["text"] for c in tg.calls_to("sendMessage")] == ["eventually"] * 3


async def test_a_timed_out_send_is_not_resent(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                              bus: MessageBus, caplog: pytest.LogCaptureFixture) -> None:
    await make_channel(request_timeout_s=0.3)
    tg.delay("sendMessage", 1.0)
    await bus.publish_outbound(OutboundText(target(), "maybe delivered"))
    await bus.publish_outbound(OutboundText(target(), "next one"))
    await bus.flush_outbound()
    assert [c.params["text"] for c in tg.calls_to("sendMessage")] == ["maybe delivered", "next one"]
    assert "timed out; not resending" in caplog.text


async def test_streaming_preview_is_edited_and_replaced_once(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    await make_channel(cfg={"streaming": True}, preview_interval_s=2.0)
    await bus.publish_outbound(OutboundProgress(target(), "Thinking"))
    await bus.publish_outbound(OutboundProgress(target(), "Thinking about"))  # within the interval: skipped
    await bus.flush_outbound()
    await asyncio.sleep(2.05)  # the throttle is a time window by design: let it pass
    await bus.publish_outbound(OutboundProgress(target(), "Thinking about it"))
    await bus.publish_outbound(OutboundText(target(), "The **answer**"))
    await bus.flush_outbound()
    (preview,) = tg.calls_to("sendMessage")
    assert preview.params["text"] == "Thinking" and "parse_mode" not in preview.params
    edits = tg.calls_to("editMessageText")
    assert [e.params["text"] for e in edits] == ["Thinking about it", "The <b>answer</b>"]
    assert edits[-1].params["parse_mode"] == "HTML"
    sent_id = next(iter(tg.messages))[1]
    assert all(e.params["message_id"] == str(sent_id) for e in edits)


async def test_progress_is_ignored_without_streaming(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                                     bus: MessageBus) -> None:
    await make_channel()
    await bus.publish_outbound(OutboundProgress(target(), "partial"))
    await bus.publish_outbound(OutboundText(target(), "final"))
    await bus.flush_outbound()
    assert [c.params["text"] for c in tg.calls_to("sendMessage")] == ["final"]
    assert tg.calls_to("editMessageText") == []


# ----------------------------------------------------------------------------- resilience


async def test_polling_errors_back_off_and_log_once_per_incident(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lucidgate.channels.telegram")
    tg.fail("getUpdates", 500, "Internal Server Error", times=4)
    await make_channel()
    tg.push_message(chat_id=OWNER, text="still here")
    assert (await next_inbound(bus)).text == "still here"
    failures = [r for r in caplog.records if "polling failed" in r.getMessage()]
    recoveries = [r for r in caplog.records if "recovered after 4" in r.getMessage()]
    assert len(failures) == 1 and len(recoveries) == 1


async def test_watchdog_restarts_a_stuck_poll(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                              bus: MessageBus) -> None:
    tg.hang_get_updates = True
    channel = await make_channel(cfg={"watchdogS": 0.3}, request_timeout_s=30)
    await until(lambda: channel.poll_restarts >= 1, timeout=5)
    tg.hang_get_updates = False
    tg.push_message(chat_id=OWNER, text="unstuck")
    assert (await next_inbound(bus)).text == "unstuck"


async def test_telegram_unreachable_at_start_does_not_crash(
        make_config: Any, workspace: Path, bus: MessageBus, tg: FakeTelegramAPI) -> None:
    tg.fail("getMe", 502, "Bad Gateway", times=2)
    cfg = make_config(channels={"telegram": {"token": TOKEN, "apiBase": tg.base_url, "allowFrom": ["42"],
                                             "pollTimeoutS": 1}})
    channel = TelegramChannel(TelegramSettings.from_section(cfg.channels.telegram, retry_base_s=0.02), bus,
                              workspace=workspace, limiter=fast_limiter())
    await channel.start()
    try:
        tg.push_message(chat_id=OWNER, text="you came back")
        assert (await next_inbound(bus)).text == "you came back"
        assert len(tg.calls_to("getMe")) == 3
    finally:
        await channel.stop()


async def test_rejected_token_is_a_config_error_without_the_token(
        make_config: Any, workspace: Path, bus: MessageBus, tg: FakeTelegramAPI) -> None:
    cfg = make_config(channels={"telegram": {"token": "999:wrong-token-value", "apiBase": tg.base_url}})
    channel = TelegramChannel(TelegramSettings.from_section(cfg.channels.telegram), bus, workspace=workspace)
    with pytest.raises(ConfigError) as info:
        await channel.start()
    assert "wrong-token-value" not in str(info.value)
    empty = TelegramChannel(TelegramSettings.from_section(make_config().channels.telegram), bus,
                            workspace=workspace)
    with pytest.raises(ConfigError):
        await empty.start()


async def test_token_is_redacted_from_log_records(make_channel: MakeChannel, tg: FakeTelegramAPI,
                                                  bus: MessageBus, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # other libraries (litellm) raise httpx's own level at import; its request lines carry the URL
    caplog.set_level(logging.DEBUG, logger="httpx")
    await make_channel()
    tg.push_message(chat_id=OWNER, text="log me")
    await next_inbound(bus)
    tg.fail("sendMessage", 400, "Bad Request: chat not found")
    await bus.publish_outbound(OutboundText(target(), "x"))
    await bus.flush_outbound()
    logging.getLogger("telegram.ext.Application").error("url was %s/bot%s/x", tg.base_url, TOKEN)
    try:
        raise RuntimeError(f"boom at /bot{TOKEN}/getMe")
    except RuntimeError:
        logging.getLogger("httpx").exception("request failed")
    secret_part = TOKEN.split(":", 1)[1]
    assert any("***" in r.getMessage() for r in caplog.records if r.name == "httpx")
    assert all(secret_part not in r.getMessage() for r in caplog.records)
    assert secret_part not in caplog.text


# ----------------------------------------------------------------------------- webhook


async def test_webhook_mode_checks_the_secret_and_publishes(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel(cfg={"webhook": {"url": "https://bot.example.org/telegram/webhook",
                                                  "secretToken": "s3cret-value"}})
    (hook,) = tg.calls_to("setWebhook")
    assert hook.params["url"] == "https://bot.example.org/telegram/webhook"
    assert hook.params["secret_token"] == "s3cret-value"
    assert tg.calls_to("getUpdates") == [] and tg.calls_to("deleteWebhook") == []

    app = FastAPI()
    app.include_router(channel.router())
    update = {"update_id": 1, "message": {"message_id": 77, "date": 1, "chat": {"id": OWNER, "type": "private"},
                                          "from": {"id": OWNER, "is_bot": False, "first_name": "Ann"},
                                          "text": "via webhook"}}
    async with served_client(app) as client:
        assert (await client.post("/telegram/webhook", json=update)).status_code == 403
        wrong = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-valuX"}
        assert (await client.post("/telegram/webhook", json=update, headers=wrong)).status_code == 403
        assert bus.inbound_depth == 0
        good = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-value"}
        assert (await client.post("/telegram/webhook", json=update, headers=good)).status_code == 200
        msg = await next_inbound(bus)
        assert (msg.text, msg.message_id, msg.chat_id) == ("via webhook", "77", "42")
        assert (await client.post("/telegram/webhook", json=update, headers=good)).status_code == 200
        assert bus.inbound_depth == 0  # Telegram's retry of the same update is deduplicated
        bad = await client.post("/telegram/webhook", content=b"{not json", headers=good)
        assert bad.status_code == 400
        huge = await client.post("/telegram/webhook", content=b"x" * (1024 * 1024 + 10), headers=good)
        assert huge.status_code == 413


async def test_webhook_caps_chunked_bodies_and_rejected_setup_is_a_config_error(
        make_channel: MakeChannel, tg: FakeTelegramAPI, bus: MessageBus) -> None:
    channel = await make_channel(cfg={"webhook": {"url": "https://bot.example.org/telegram/webhook",
                                                  "secretToken": "s3cret-value"}})
    app = FastAPI()
    app.include_router(channel.router())

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(300):
            yield b"x" * 4096

    good = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-value"}
    async with served_client(app) as client:
        response = await client.post("/telegram/webhook", content=chunks(), headers=good)
    assert response.status_code == 413
    assert bus.inbound_depth == 0

    tg.fail("setWebhook", 400, "Bad Request: bad webhook: HTTPS url must be provided for webhook")
    with pytest.raises(ConfigError, match="(?i)https url must be provided"):
        await make_channel(cfg={"webhook": {"url": "http://insecure.example.org/hook"}})


async def test_polling_channel_has_no_webhook_route(make_channel: MakeChannel) -> None:
    channel = await make_channel()
    assert channel.router().routes == []


async def test_webhook_secret_defaults_to_one_derived_from_the_token(
        make_channel: MakeChannel, tg: FakeTelegramAPI) -> None:
    await make_channel(cfg={"webhook": {"url": "https://bot.example.org/telegram/webhook"}})
    secret = tg.calls_to("setWebhook")[0].params["secret_token"]
    assert len(secret) >= 32 and TOKEN not in secret and TOKEN.split(":")[1] not in secret


def test_menu_uses_telegram_spelling_and_limits() -> None:
    specs = [CommandSpec("dream-log", "list memory changes"), CommandSpec("Dream_Log", "a duplicate"),
             CommandSpec("x" * 33, "too long a name"), CommandSpec("caf\u00e9", "not [a-z0-9_]"),
             CommandSpec("memory", "d" * 300, owner_only=True), CommandSpec("new", "")]
    assert menu_commands(specs) == [("dream_log", "List memory changes"), ("memory", "D" + "d" * 255),
                                    ("new", "New")]


async def test_build_uses_the_config_section(make_config: Any, workspace: Path, bus: MessageBus) -> None:
    cfg = make_config(channels={"telegram": {"enabled": True, "token": TOKEN, "apiBase": "http://127.0.0.1:9/"}})
    channel = build(cfg, deps_at(bus, workspace))
    assert channel.name == "telegram" and channel.api_base == "http://127.0.0.1:9"
    assert channel.describe() == "long polling via http://127.0.0.1:9, 0 allowed, pairing False"
    assert TOKEN not in channel.describe()
    default = build(make_config(channels={"telegram": {"token": TOKEN}}), deps_at(bus, workspace))
    assert default.api_base == "https://api.telegram.org"
    with pytest.raises(ChannelUnavailable, match=r"no token \(set channels.telegram.token\)"):
        build(make_config(), deps_at(bus, workspace))


# ----------------------------------------------------------------------------- formatting


def test_markdown_becomes_telegram_html() -> None:
    source = (
        "# Plan\n"
        "Some **bold**, *italic*, _also italic_, ~~gone~~ and `x < y && z` in snake_case_names.\n"
        "- see [the docs](https://example.org/a_b?x=1&y=2) or https://example.org/c_d_e\n"
        "\n"
        "```python\n"
        "if a < b and c > d:\n"
        "    print('**not bold**')\n"
        "```\n"
        "5 < 6 & 7 > 3"
    )
    assert markdown_to_html(source) == (
        "<b>Plan</b>\n\n"
        "Some <b>bold</b>, <i>italic</i>, <i>also italic</i>, <s>gone</s> and <code>x &lt; y &amp;&amp; z</code>"
        " in snake_case_names.\n\n"
        '• see <a href="https://example.org/a_b?x=1&amp;y=2">the docs</a> or https://example.org/c_d_e\n\n'
        '<pre><code class="language-python">if a &lt; b and c &gt; d:\n'
        "    print('**not bold**')</code></pre>\n\n"
        "5 &lt; 6 &amp; 7 &gt; 3"
    )
    assert html_error(markdown_to_html(source)) is None


def test_headings_are_bold_once() -> None:
    assert markdown_to_html("## **Results** & notes ##") == "<b>Results &amp; notes</b>"


def test_raw_html_and_odd_markup_stay_text() -> None:
    source = "**bold *nested***<b> and **open"
    html_ = markdown_to_html(source)
    assert html_ == "<b>bold <i>nested</i></b>&lt;b&gt; and **open"
    assert html_error(html_) is None
    assert html_to_plain(html_) == "bold nested<b> and **open"


@pytest.mark.parametrize("limit", [50, 200, 4096])
def test_chunks_respect_the_limit_and_keep_all_text(limit: int) -> None:
    paragraphs = [f"Paragraph {i}: " + "word & <tag> " * (i * 3 + 1) for i in range(30)]
    code = "\n".join(f"x{i} = {i} < {i + 1}" for i in range(80))
    text = "\n\n".join(paragraphs[:15]) + f"\n\n```\n{code}\n```\n\n" + "\n\n".join(paragraphs[15:])
    chunks = render(text, limit)
    assert all(len(c) <= limit for c in chunks)
    assert all(html_error(c) is None for c in chunks)
    plain = "".join(html_to_plain(c) for c in chunks)
    squash = "".join(text.replace("```", "").split())
    assert "".join(plain.split()) == squash


def test_split_prefers_paragraphs_and_moves_small_code_blocks_whole() -> None:
    first = "A" * 2500
    second = "B" * 1000
    code = "\n".join(["print('x')"] * 100)  # ~1100 chars: fits a message, not the rest of the first
    chunks = render(f"{first}\n\n{second}\n\n```\n{code}\n```", 4096)
    assert chunks[0] == f"{first}\n\n{second}"
    assert chunks[1].startswith("<pre><code>") and chunks[1].endswith("</code></pre>")
    assert len(chunks) == 2


def test_plain_split_uses_lines_then_words() -> None:
    text = "\n".join(["alpha beta gamma"] * 10)
    parts = split_plain(text, 40)
    assert all(len(p) <= 40 for p in parts) and all(p.startswith("alpha") for p in parts)
    assert split_plain("x" * 95, 40) == ["x" * 40, "x" * 40, "x" * 15]


def test_hard_cuts_never_split_an_entity() -> None:
    chunks = render("&" * 30, 12)
    assert all(len(c) <= 12 for c in chunks)
    assert all(html_error(c) is None and "&amp;" * (len(c) // 5) == c for c in chunks)
    assert sum(c.count("&amp;") for c in chunks) == 30


# ----------------------------------------------------------------------------- limiter


class Flaky(Exception):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.action)
        self.verdict = verdict


def by_attribute(exc: BaseException) -> Verdict:
    return exc.verdict if isinstance(exc, Flaky) else Verdict.fail()


async def test_limiter_paces_each_chat_after_its_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waits the limiter schedules, read on a stopped clock (no wall time measured): a
    chat's burst goes at once, then 5/s; another chat is not held up behind it."""
    from lucidgate.channels import _ratelimit

    monkeypatch.setattr(_ratelimit, "time", SimpleNamespace(monotonic=lambda: 1000.0))
    waits: dict[str, list[float]] = {"a": [], "b": []}
    chat: contextvars.ContextVar[str] = contextvars.ContextVar("chat")

    async def sleep_until(at: float) -> None:  # what the limiter would sleep, recorded
        waits[chat.get()][-1] += max(0.0, at - 1000.0)

    monkeypatch.setattr(OutboundLimiter, "_sleep_until", staticmethod(sleep_until))
    limiter = OutboundLimiter("t", by_attribute, rate_per_s=1000, burst=100, per_key_rate_per_s=5, per_key_burst=2)

    async def send(key: str) -> None:
        chat.set(key)
        waits[key].append(0.0)
        await limiter.run(key, _nothing)

    await asyncio.gather(*(send(k) for k in ["a"] * 4 + ["b"] * 2))
    assert waits["a"] == pytest.approx([0.0, 0.0, 0.2, 0.4])  # a burst of two, then 5/s
    assert waits["b"] == [0.0, 0.0]  # another chat's burst is its own


async def _nothing() -> None:
    return None


async def test_limiter_retry_verdicts() -> None:
    limiter = OutboundLimiter("t", by_attribute, backoff_s=0.01, max_attempts=3, per_key_rate_per_s=1000)
    script = [Flaky(Verdict.retry()), Flaky(Verdict.wait(0.05))]
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if script:
            raise script.pop(0)
        return "sent"

    assert await limiter.run("k", flaky) == "sent"
    assert calls == 3 and limiter.waits == [0.05]

    calls = 0

    async def always_timeout() -> None:
        nonlocal calls
        calls += 1
        raise Flaky(Verdict.uncertain())

    with pytest.raises(DeliveryUncertain):
        await limiter.run("k", always_timeout)
    assert calls == 1  # a timed-out send is never resent

    async def always_5xx() -> None:
        raise Flaky(Verdict.retry())

    with pytest.raises(DeliveryFailed):
        await limiter.run("k", always_5xx)

    async def too_long_wait() -> None:
        raise Flaky(Verdict.wait(10_000))

    with pytest.raises(DeliveryFailed):
        await limiter.run("k", too_long_wait)

    async def bug() -> None:
        raise KeyError("fatal")

    with pytest.raises(KeyError):
        await limiter.run("k", bug)


def test_telegram_failures_are_classified() -> None:
    from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TimedOut

    assert classify(RetryAfter(3)) == Verdict.wait(3)
    assert classify(BadRequest("Can't parse entities")).action == "fail"
    assert classify(Forbidden("bot was blocked by the user")).action == "fail"
    assert classify(NetworkError("Internal Server Error (500)")).action == "retry"
    read_timeout = TimedOut()
    read_timeout.__cause__ = httpx.ReadTimeout("slow")
    assert classify(read_timeout).action == "uncertain"
    connect_timeout = TimedOut()
    connect_timeout.__cause__ = httpx.ConnectTimeout("no route")
    assert classify(connect_timeout).action == "retry"
    refused = NetworkError("httpx.ConnectError")
    refused.__cause__ = httpx.ConnectError("refused")
    assert classify(refused).action == "retry"
    dropped = NetworkError("httpx.RemoteProtocolError")
    dropped.__cause__ = httpx.RemoteProtocolError("peer closed")
    assert classify(dropped).action == "uncertain"


async def test_an_update_that_keeps_failing_is_skipped_after_three_tries(
        make_channel: MakeChannel, tg: FakeTelegramAPI, workspace: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    class PoisonBus(MessageBus):
        """Publishing one particular text always fails (a bug, a full disk for that message)."""

        def __init__(self) -> None:
            super().__init__()
            self.poison_attempts = 0

        async def publish_inbound(self, msg: InboundMessage, *, timeout: float | None = None) -> bool:
            if msg.text == "poison":
                self.poison_attempts += 1
                raise OSError("cannot store this one")
            return await super().publish_inbound(msg, timeout=timeout)

    poison_bus = PoisonBus()
    await poison_bus.start()
    try:
        with caplog.at_level(logging.WARNING, logger="lucidgate.channels.telegram"):
            await make_channel(bus_=poison_bus)
            bad = tg.push_message(chat_id=OWNER, text="poison")
            tg.push_message(chat_id=OWNER, text="fine")
            assert (await next_inbound(poison_bus)).text == "fine"  # the next update is not held up
        assert poison_bus.poison_attempts == 3
        assert "failed 3 times; skipping it" in caplog.text
        state_file = workspace / "state" / "telegram.json"

        def saved_past_it() -> bool:
            return state_file.exists() and json.loads(state_file.read_text())["last_update_id"] > bad["update_id"]

        await until(saved_past_it)  # acknowledged: Telegram will not resend it
    finally:
        await poison_bus.stop()
