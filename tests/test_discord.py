"""The Discord channel: the real discord.py against a loopback stand-in of REST and Gateway.

Every test drives a real ``discord.Client`` (through ``DiscordChannel``) and a real
``MessageBus`` with an ``InboxJournal``; assertions are on what reached the bus and on the
REST calls and Gateway frames the stand-in recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.discord import DiscordChannel, DiscordSettings
from lucidgate.channels.discord.send import classify
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, OutboundProgress, OutboundText, OutboundTyping, Target
from tests.fakes.discord_api import BOT_ID, GUILD_CHANNEL, GUILD_ID, THREAD_ID, TOKEN, FakeDiscordAPI, user
from tests.waiting import until

OWNER = 4242
FRIEND = 4343
STRANGER = 6666
REFUSAL = "Sorry, I only talk to people my owner has allowed."


@pytest_asyncio.fixture
async def dc() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as fake:
        yield fake


@pytest_asyncio.fixture
async def bus(workspace: Path) -> AsyncIterator[MessageBus]:
    bus = MessageBus(inbox=InboxJournal(workspace / "inbox.jsonl"))
    await bus.start()
    yield bus
    await bus.stop()


def fast_limiter() -> OutboundLimiter:
    return OutboundLimiter("discord", classify, rate_per_s=1000, burst=1000, per_key_rate_per_s=1000,
                           per_key_burst=1000, backoff_s=0.05)


MakeChannel = Callable[..., Awaitable[DiscordChannel]]


@pytest_asyncio.fixture
async def make_channel(make_config: Any, workspace: Path, dc: FakeDiscordAPI,
                       bus: MessageBus) -> AsyncIterator[MakeChannel]:
    started: list[DiscordChannel] = []

    async def build(*, cfg: dict[str, Any] | None = None, connect: bool = True, **kwargs: Any) -> DiscordChannel:
        section = {"enabled": True, "token": TOKEN, "apiBase": dc.base_url, "allowFrom": [str(FRIEND)],
                   "owners": [str(OWNER)], **(cfg or {})}
        limiter = kwargs.pop("limiter", fast_limiter())
        config = make_config(channels={"discord": section})
        channel = DiscordChannel(DiscordSettings.from_section(config.channels.discord, **kwargs), bus,
                                 workspace=workspace, limiter=limiter)
        started.append(channel)
        await channel.start()
        if connect:
            await asyncio.wait_for(channel.connected.wait(), 30)
        return channel

    yield build
    for channel in started:
        await channel.stop()


async def next_inbound(bus: MessageBus, timeout: float = 30.0) -> InboundMessage:
    delivery = await asyncio.wait_for(bus.consume_inbound(), timeout)
    await bus.ack(delivery)
    return delivery.msg


def dm_target(reply_to: str | None = None) -> Target:
    return Target("discord", str(OWNER + 1), None, reply_to)


# ----------------------------------------------------------------------------- intake


async def test_a_dm_becomes_an_inbound_message(make_channel: MakeChannel, dc: FakeDiscordAPI,
                                               bus: MessageBus) -> None:
    channel = await make_channel()
    identify = dc.gateway.ops(2)[0]
    assert identify["token"] == TOKEN and identify["intents"] & (1 << 15)  # message content
    assert dc.gateway.ops(1), "discord.py heartbeats after HELLO"
    sent = await dc.push_dm(user_id=OWNER, text="hello there")
    msg = await next_inbound(bus)
    assert msg == InboundMessage(channel="discord", chat_id=str(OWNER + 1), sender_id=str(OWNER), text="hello there",
                                 chat_type="private", message_id=sent["id"], sender_name="Ann", role="owner",
                                 account=str(BOT_ID))  # the bot it came to: bindings' `account`
    assert msg.session_key == f"discord:{OWNER + 1}"
    assert channel.bot_id == str(BOT_ID)



async def test_guild_messages_need_a_mention_or_a_reply_and_threads_are_their_own_chat(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    await make_channel()
    friend, bot = user(FRIEND, "fred"), dc.bot
    await dc.push(dc.message(GUILD_CHANNEL, friend, "just chatting", guild_id=GUILD_ID))
    mention = await dc.push(dc.message(GUILD_CHANNEL, friend, f"<@{BOT_ID}> what time is it?",
                                       guild_id=GUILD_ID, mentions=[bot]))
    msg = await next_inbound(bus)
    assert (msg.chat_id, msg.text, msg.chat_type, msg.message_id) == (
        str(GUILD_CHANNEL), "what time is it?", "group", mention["id"])
    ours = dc.message(GUILD_CHANNEL, bot, "It is noon.", guild_id=GUILD_ID)
    await dc.push(dc.message(GUILD_CHANNEL, friend, "and tomorrow?", guild_id=GUILD_ID, reply_to=ours))
    assert (await next_inbound(bus)).text == "and tomorrow?"
    await dc.push(dc.message(THREAD_ID, friend, f"<@!{BOT_ID}> in the thread", guild_id=GUILD_ID, mentions=[bot]))
    threaded = await next_inbound(bus)
    assert (threaded.session_key, threaded.text) == (f"discord:{THREAD_ID}", "in the thread")
    await dc.push(dc.message(GUILD_CHANNEL, bot, f"<@{BOT_ID}> my own echo", guild_id=GUILD_ID, mentions=[bot]))
    await dc.push_dm(user_id=OWNER, text="marker")
    assert (await next_inbound(bus)).text == "marker"  # the unaddressed and the bot's own were skipped


async def test_a_stranger_gets_one_refusal_and_nothing_reaches_the_bus(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    await make_channel()
    first = await dc.push_dm(user_id=STRANGER, text="let me in", name="mallory")
    await dc.push_dm(user_id=STRANGER, text="please", name="mallory")
    await until(lambda: dc.calls_to("POST /messages"), what="the refusal")
    await dc.push_dm(user_id=OWNER, text="marker")
    assert (await next_inbound(bus)).sender_id == str(OWNER)
    await bus.flush_outbound()
    refusals = dc.calls_to("POST /messages")
    assert [c.body["content"] for c in refusals] == [REFUSAL]  # once per interval
    assert refusals[0].path.endswith(f"/channels/{STRANGER + 1}/messages")
    assert str(refusals[0].body["message_reference"]["message_id"]) == first["id"]


async def test_pairing_code_goes_to_a_stranger_in_a_dm(make_channel: MakeChannel, dc: FakeDiscordAPI,
                                                       bus: MessageBus) -> None:
    await make_channel(cfg={"pairing": True})
    await dc.push_dm(user_id=STRANGER, text="hi", name="mallory")
    await until(lambda: dc.calls_to("POST /messages"), what="the pairing reply")
    assert "lucid pairing approve" in dc.calls_to("POST /messages")[0].body["content"]


# ----------------------------------------------------------------------------- outbound


async def test_a_long_reply_is_split_fence_safe_as_a_reply_that_pings_nobody(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    await make_channel()
    code = "\n".join(f"line {i} of the listing" for i in range(150))
    text = f"Here you go, @everyone:\n\n```python\n{code}\n```\n\nDone."
    await bus.publish_outbound(OutboundText(dm_target("777"), text))
    await until(lambda: "Done." in "".join(dc.texts()), what="the last part")
    parts = dc.texts()
    assert len(parts) >= 2 and all(len(p) <= 2000 for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts)  # every piece closes its fence
    calls = dc.calls_to("POST /messages")
    assert str(calls[0].body["message_reference"]["message_id"]) == "777"
    assert all("message_reference" not in c.body for c in calls[1:])
    assert all(c.body["allowed_mentions"]["parse"] == [] for c in calls)
    shown = "".join(parts)
    assert all(f"line {i} of the listing" in shown for i in range(150))


async def test_streaming_edits_one_message_then_replaces_it_with_the_answer(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    channel = await make_channel(cfg={"streaming": True, "previewIntervalS": 0.2})
    target = dm_target("900")
    await channel.send(OutboundProgress(target, "The ans"))
    await channel.send(OutboundProgress(target, "The answer"))  # within the interval: no edit
    assert len(dc.calls_to("POST /messages")) == 1 and not dc.calls_to("PATCH /messages")
    await until(lambda: time_passed(channel, target, 0.2), what="the preview interval")
    await channel.send(OutboundProgress(target, "The answer is"))
    await channel.send(OutboundText(target, "The answer is **42**."))
    assert len(dc.calls_to("POST /messages")) == 1  # one message for the whole turn
    assert [c.body["content"] for c in dc.calls_to("PATCH /messages")] == ["The answer is", "The answer is **42**."]
    assert dc.texts() == ["The answer is **42**."]


def time_passed(channel: DiscordChannel, target: Target, seconds: float) -> bool:
    preview = channel.sender._previews.shown((target.chat_id, target.reply_to))
    return preview is not None and asyncio.get_running_loop().time() - preview.sent_at >= seconds


async def test_typing_is_shown_and_refreshed_until_the_reply(make_channel: MakeChannel, dc: FakeDiscordAPI,
                                                             bus: MessageBus) -> None:
    channel = await make_channel(typing_refresh_s=0.05)
    await channel.send(OutboundTyping(dm_target()))
    await until(lambda: len(dc.calls_to("POST /typing")) >= 3, what="typing refreshed")
    loop_task = channel.sender.typing.task(dm_target())
    await channel.send(OutboundText(dm_target(), "done"))
    assert channel.sender.typing.task(dm_target()) is None
    assert loop_task is not None
    await asyncio.gather(loop_task, return_exceptions=True)
    await dc.push_dm(user_id=OWNER, text="marker")  # a round trip: a trigger in flight has landed
    await next_inbound(bus)
    count = len(dc.calls_to("POST /typing"))
    await dc.push_dm(user_id=OWNER, text="marker 2")  # and another: the stopped loop sends nothing more
    await next_inbound(bus)
    assert len(dc.calls_to("POST /typing")) == count


async def test_a_429_is_waited_out_for_its_retry_after_and_sent_once(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    await make_channel()
    dc.fail("POST /messages", 429, retry_after=0.3, message="You are being rate limited.")
    await bus.publish_outbound(OutboundText(dm_target(), "after the limit"))
    await until(lambda: dc.texts() == ["after the limit"], what="the retried send")
    first, second = dc.calls_to("POST /messages")
    assert second.at - first.at >= 0.3
    assert dc.texts() == ["after the limit"]


async def test_server_errors_are_retried_from_the_outbox_and_a_refusal_is_dead_lettered(
        make_config: Any, workspace: Path, dc: FakeDiscordAPI) -> None:
    from lucidgate.channels.outbox import Outbox

    outbox = Outbox(workspace / "state" / "outbox.sqlite", deadlines_s={"discord": 24 * 3600.0})
    bus = MessageBus(outbox=outbox, retry_backoff_s=0.05)
    await bus.start()
    config = make_config(channels={"discord": {"enabled": True, "token": TOKEN, "apiBase": dc.base_url}})
    channel = DiscordChannel(DiscordSettings.from_section(config.channels.discord), bus, workspace=workspace,
                             limiter=fast_limiter())
    try:
        await channel.start()
        dc.set_outage(503)
        await bus.publish_outbound(OutboundText(dm_target(), "through the outage"))
        await until(lambda: len(dc.calls_to("POST /messages")) >= 3, what="retries during the outage")
        assert outbox.counts()["pending"] == 1
        dc.set_outage(None)
        await until(lambda: outbox.counts()["delivered"] == 1, what="delivered after the outage")
        assert dc.texts() == ["through the outage"]
        dc.fail("POST /messages", 403, message="Missing Access")
        await bus.publish_outbound(OutboundText(Target("discord", "12345"), "nowhere"))
        await until(lambda: outbox.counts()["dead"] == 1, what="the dead letter")
    finally:
        await channel.stop()
        await bus.stop()
        outbox.close()


# ----------------------------------------------------------------------------- gateway


async def test_a_dropped_socket_resumes_and_loses_or_repeats_nothing(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    channel = await make_channel()
    await dc.push_dm(user_id=OWNER, text="before")
    assert (await next_inbound(bus)).text == "before"
    await dc.gateway.drop()
    await dc.push_dm(user_id=OWNER, text="while down")  # kept by the session, replayed on resume
    await until(lambda: channel.resumes == 1, what="the resume")
    resume = dc.gateway.ops(6)[0]
    assert resume["session_id"] == "session-1" and resume["seq"] >= 3
    assert len(dc.gateway.ops(2)) == 1  # resumed, not identified again
    await dc.push_dm(user_id=OWNER, text="after")
    texts = [(await next_inbound(bus)).text for _ in range(2)]
    assert texts == ["while down", "after"]
    # the whole session replayed again (a client that lost its place) is dropped as duplicates
    session = dc.gateway.current
    assert session is not None
    for event in [e for e in session.events if e["t"] == "MESSAGE_CREATE"]:
        await dc.push(event["d"])
    await dc.push_dm(user_id=OWNER, text="fresh")
    assert (await next_inbound(bus)).text == "fresh"


async def test_a_silent_gateway_is_left_and_the_session_resumed(make_channel: MakeChannel, dc: FakeDiscordAPI,
                                                                 bus: MessageBus) -> None:
    dc.gateway.heartbeat_interval_ms = 100
    channel = await make_channel(heartbeat_timeout_s=0.5)
    dc.gateway.ack_heartbeats = False  # a zombie connection: nothing comes back
    await until(lambda: dc.gateway.ops(6), what="the resume after the silence")
    dc.gateway.ack_heartbeats = True
    await until(lambda: channel.resumes >= 1, what="resumed")
    await dc.push_dm(user_id=OWNER, text="still here")
    assert (await next_inbound(bus)).text == "still here"
    assert len(dc.gateway.ops(2)) == 1


async def test_a_missing_message_content_intent_fails_the_start_with_the_fix(
        make_channel: MakeChannel, dc: FakeDiscordAPI) -> None:
    from lucidgate.config.errors import ConfigError

    dc.gateway.message_content_enabled = False  # not switched on in the Developer Portal
    with pytest.raises(ConfigError, match="Message Content intent.*Developer Portal"):
        await make_channel(connect=False)
    assert dc.gateway.connections == 1  # given up: 4014 is not retried


async def test_a_rejected_token_is_a_config_error_without_the_token(
        make_config: Any, workspace: Path, dc: FakeDiscordAPI, bus: MessageBus) -> None:
    from lucidgate.config.errors import ConfigError

    config = make_config(channels={"discord": {"enabled": True, "token": "wrong-token-123", "apiBase": dc.base_url}})
    channel = DiscordChannel(DiscordSettings.from_section(config.channels.discord), bus, workspace=workspace)
    try:
        await channel.start()
    except ConfigError as exc:
        assert "channels.discord.token" in str(exc) and "wrong-token-123" not in str(exc)
    else:
        raise AssertionError("a rejected token must refuse to start")
    from discord.http import Route
    assert Route.BASE == "https://discord.com/api/v10"  # put back after the failed start


async def test_attachments_are_saved_into_the_workspace(make_channel: MakeChannel, dc: FakeDiscordAPI,
                                                        bus: MessageBus, workspace: Path) -> None:
    await make_channel()
    note = dc.add_attachment("notes.txt", b"remember the milk")
    await dc.push_dm(user_id=OWNER, text="see attached", attachments=[note])
    msg = await next_inbound(bus)
    rel = f"media/discord/{OWNER + 1}/{note['id']}-notes.txt"
    assert msg.media == (rel,)
    assert msg.text == f"[file: {rel}]\nsee attached"
    assert (workspace / rel).read_bytes() == b"remember the milk"


async def test_files_go_out_as_attachments_after_the_text(make_channel: MakeChannel, dc: FakeDiscordAPI,
                                                          workspace: Path) -> None:
    channel = await make_channel()
    report = workspace / "report.csv"
    report.write_text("a,b\n1,2\n")
    await channel.sender.deliver(dm_target("55"), "Here is the report.", files=[report])
    text_call, file_call = dc.calls_to("POST /messages")
    assert text_call.body["content"] == "Here is the report." and not text_call.files
    assert file_call.files == {"report.csv": b"a,b\n1,2\n"}


async def test_a_reply_naming_files_uploads_them_and_names_a_missing_one(
        make_channel: MakeChannel, dc: FakeDiscordAPI, workspace: Path) -> None:
    channel = await make_channel()
    (workspace / "out").mkdir()
    (workspace / "out" / "plot.png").write_bytes(b"\x89PNG plot")
    await channel.send(OutboundText(dm_target(), "Your plot.", files=("out/plot.png", "gone.txt")))
    text_call, file_call = dc.calls_to("POST /messages")
    assert text_call.body["content"] == "Your plot.\n\n(file not sent: gone.txt no longer exists)"
    assert file_call.files == {"plot.png": b"\x89PNG plot"}


async def test_a_restart_catches_up_on_what_was_sent_meanwhile_once(
        make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus, workspace: Path) -> None:
    first = await make_channel()
    await dc.push_dm(user_id=OWNER, text="before")
    assert (await next_inbound(bus)).text == "before"
    await until(lambda: (workspace / "state" / "discord.json").exists(), what="the catch-up state")
    await first.stop()
    await dc.push_dm(user_id=OWNER, text="while away")  # no session: Discord would not replay it
    friend = user(FRIEND, "fred")
    await dc.push(dc.message(GUILD_CHANNEL, friend, "unaddressed, while away", guild_id=GUILD_ID))
    await make_channel()
    assert (await next_inbound(bus)).text == "while away"
    assert len(dc.gateway.ops(2)) == 2  # a new session, not a resume
    await dc.push_dm(user_id=OWNER, text="after")
    assert (await next_inbound(bus)).text == "after"  # "before" was not handed over again
    history = [c for c in dc.calls if c.route == "GET /messages"]
    assert [c.path.split("/")[4] for c in history] == [str(OWNER + 1)]  # only the chats it knows


async def test_a_configured_gateway_url_is_used_without_asking_rest(make_channel: MakeChannel,
                                                                    dc: FakeDiscordAPI, bus: MessageBus) -> None:
    await make_channel(cfg={"gatewayUrl": dc.gateway_url})
    assert not dc.calls_to("GET /gateway/bot")
    await dc.push_dm(user_id=OWNER, text="via the configured gateway")
    assert (await next_inbound(bus)).text == "via the configured gateway"


async def test_the_token_never_reaches_a_log_line(make_channel: MakeChannel, dc: FakeDiscordAPI, bus: MessageBus,
                                                  caplog: Any) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    await make_channel()
    await dc.push_dm(user_id=OWNER, text="hello")
    await next_inbound(bus)
    await bus.publish_outbound(OutboundText(dm_target(), "hi"))
    await until(lambda: dc.texts() == ["hi"], what="the reply")
    assert "identify" in caplog.text.lower()  # debug logging was on
    logging.getLogger("discord.gateway").debug("a library line that names the token %s", TOKEN)
    assert "a library line that names the token" in caplog.text
    assert TOKEN not in caplog.text  # masked wherever it turns up
