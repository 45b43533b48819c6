"""The DingTalk channel: the real dingtalk-stream SDK against a loopback DingTalk stand-in.

The stand-in (``tests.fakes.dingtalk_server``) hands out a ticket at the connection-open
endpoint, pushes robot messages as CALLBACK frames over its websocket and records the ACK
frames the SDK answers with; replies arrive at its session webhook or its OpenAPI sends. The
bus is the real one with its durable inbox journal.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.dingtalk import DingTalkChannel, DingTalkSettings, build
from lucidgate.channels.dingtalk.format import MAX_MESSAGE_CHARS, parse_turn, to_chunks
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, OutboundText, Target
from lucidgate.config.errors import ConfigError
from tests.channel_kit import deps_at
from tests.fakes.dingtalk_server import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.waiting import until

OWNER, FRIEND, STRANGER = "staff-owner", "staff-friend", "staff-stranger"
REFUSAL = "Sorry, I only talk to people my owner has allowed."


@pytest_asyncio.fixture
async def dt() -> AsyncIterator[FakeDingTalk]:
    async with FakeDingTalk() as fake:
        yield fake


@pytest_asyncio.fixture
async def bus(workspace: Path) -> AsyncIterator[MessageBus]:
    bus = MessageBus(inbox=InboxJournal(workspace / "state" / "inbox.jsonl"))
    await bus.start()
    yield bus
    await bus.stop()


def section(dt: FakeDingTalk, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET, "apiBase": dt.base_url,
            "allowFrom": [FRIEND], "owners": [OWNER], **extra}


@pytest_asyncio.fixture
async def make_channel(make_config: Callable[..., Any], dt: FakeDingTalk, bus: MessageBus,
                       workspace: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[DingTalkChannel] = []

    async def start(*, tuning: dict[str, Any] | None = None, **extra: Any) -> DingTalkChannel:
        config = make_config(channels={"dingtalk": section(dt, **extra)})
        settings = DingTalkSettings.from_section(config.channels.dingtalk, reconnect_backoff_s=0.05,
                                                 **(tuning or {}))
        channel = DingTalkChannel(settings, bus, workspace=workspace)
        await channel.start()
        started.append(channel)
        await dt.wait_connected(len(started))
        await asyncio.wait_for(channel.stream.connected.wait(), 10)
        return channel

    yield start
    for channel in started:
        await channel.stop()


async def next_inbound(bus: MessageBus, timeout: float = 5.0) -> InboundMessage:
    delivery = await asyncio.wait_for(bus.consume_inbound(), timeout)
    await bus.ack(delivery)
    return delivery.msg


async def reply(bus: MessageBus, msg: InboundMessage, text: str) -> None:
    await bus.publish_outbound(OutboundText(Target.of(msg), text))


# ----------------------------------------------------------------------------- intake


async def test_a_private_message_is_journalled_then_acked(make_channel: Callable[..., Any], dt: FakeDingTalk,
                                                          bus: MessageBus) -> None:
    await make_channel()
    frame = await dt.push(dt.robot_message("  what is my cat called?  ", sender=OWNER, nick="Olga"))
    ack = await dt.acked(frame)
    assert ack["code"] == 200 and ack["headers"]["messageId"] == frame
    msg = await next_inbound(bus)
    assert (msg.channel, msg.chat_id, msg.sender_id, msg.chat_type) == ("dingtalk", f"cid-private-{OWNER}", OWNER,
                                                                       "private")
    assert (msg.text, msg.role, msg.sender_name) == ("what is my cat called?", "owner", "Olga")
    assert msg.account == CLIENT_ID  # the robot (its robotCode, the app key by default): bindings' `account`
    assert dt.opened[0]["subscriptions"] == [{"type": "CALLBACK", "topic": "/v1.0/im/bot/messages/get"}]


async def test_a_group_message_counts_only_when_the_robot_is_mentioned(
        make_channel: Callable[..., Any], dt: FakeDingTalk, bus: MessageBus) -> None:
    await make_channel()
    ignored = await dt.push(dt.robot_message("just chatting", sender=FRIEND, group=True, at_bot=False))
    assert (await dt.acked(ignored))["code"] == 200  # handled (and dropped) before the ACK
    assert bus.inbound_depth == 0
    await dt.push(dt.robot_message("summarise the thread", sender=FRIEND, group=True))
    msg = await next_inbound(bus)
    assert (msg.chat_type, msg.chat_id, msg.sender_id, msg.role) == ("group", f"cid-group-{FRIEND}", FRIEND, "guest")
    assert msg.text == "summarise the thread"
    assert bus.inbound_depth == 0


async def test_a_redelivered_message_is_handled_once(make_channel: Callable[..., Any], dt: FakeDingTalk,
                                                     bus: MessageBus) -> None:
    await make_channel()
    data = dt.robot_message("hello once", sender=FRIEND, msg_id="msgSAME0001")
    first, again = await dt.push(data), await dt.push(data)
    assert (await dt.acked(first))["code"] == 200 and (await dt.acked(again))["code"] == 200
    msg = await next_inbound(bus)
    assert msg.message_id == "msgSAME0001"
    assert bus.inbound_depth == 0


async def test_a_stranger_is_refused_through_the_session_webhook(make_channel: Callable[..., Any],
                                                                 dt: FakeDingTalk, bus: MessageBus) -> None:
    await make_channel()
    frame = await dt.push(dt.robot_message("let me in", sender=STRANGER))
    await dt.acked(frame)
    await until(lambda: dt.sent, 10, what="the refusal")
    (refusal,) = dt.sent
    assert (refusal.via, refusal.chat, refusal.msgtype, refusal.text) == (
        "webhook", f"cid-private-{STRANGER}", "text", REFUSAL)
    assert bus.inbound_depth == 0
    await dt.acked(await dt.push(dt.robot_message("hello?", sender=STRANGER, group=True)))
    assert bus.inbound_depth == 0  # in a group too


async def test_pairing_gives_a_stranger_a_code_in_a_private_chat(make_channel: Callable[..., Any],
                                                                 dt: FakeDingTalk) -> None:
    await make_channel(pairing=True)
    await dt.push(dt.robot_message("hi", sender=STRANGER))
    await until(lambda: dt.sent, 10, what="the pairing reply")
    assert re.search(r"Pairing code: \S+ .*lucid pairing approve", dt.sent[0].text, re.DOTALL)


# ----------------------------------------------------------------------------- replies


async def test_a_reply_goes_through_the_session_webhook_as_markdown(make_channel: Callable[..., Any],
                                                                    dt: FakeDingTalk, bus: MessageBus) -> None:
    await make_channel()
    await dt.push(dt.robot_message("hi", sender=OWNER))
    await reply(bus, await next_inbound(bus), "Your cat is **Miso**.")
    await until(lambda: dt.sent, 10, what="the reply")
    (sent,) = dt.sent
    assert (sent.via, sent.msgtype, sent.text, sent.title) == ("webhook", "markdown", "Your cat is **Miso**.",
                                                               "Your cat is Miso.")


async def test_an_expired_session_webhook_falls_back_to_the_openapi_send(
        make_channel: Callable[..., Any], dt: FakeDingTalk, bus: MessageBus) -> None:
    channel = await make_channel()
    await dt.push(dt.robot_message("one", sender=OWNER, webhook_expires_in_s=-1))  # known to be expired
    await reply(bus, await next_inbound(bus), "first answer")
    await dt.push(dt.robot_message("two", sender=FRIEND, group=True))  # looks valid, DingTalk refuses it
    dt.expire_webhooks()
    await reply(bus, await next_inbound(bus), "second answer")
    await until(lambda: len(dt.sent) == 2, 10, what="both answers")
    assert [(s.via, s.chat, s.msgtype, s.text) for s in dt.sent] == [
        ("openapi", OWNER, "markdown", "first answer"),  # batchSend to the person's staff id
        ("openapi", f"cid-group-{FRIEND}", "markdown", "second answer"),  # groupMessages/send
    ]
    assert dt.tokens_issued == 1 and channel.sender.fallbacks == 2


async def test_a_long_reply_is_split_with_code_fences_intact(make_channel: Callable[..., Any],
                                                             dt: FakeDingTalk, bus: MessageBus) -> None:
    await make_channel()
    await dt.push(dt.robot_message("show me", sender=OWNER))
    code = "\n".join(f"print('line {i:04d} of the listing')" for i in range(300))
    answer = f"Here is the script:\n\n```python\n{code}\n```\n\nThat is all."
    await reply(bus, await next_inbound(bus), answer)
    await until(lambda: dt.sent and dt.sent[-1].text.endswith("That is all."), 10, what="every part")
    parts = dt.texts()
    assert len(parts) >= 3 and all(len(p) <= MAX_MESSAGE_CHARS for p in parts)
    for part in parts:
        assert part.count("```") % 2 == 0, part[:80]  # every part closes the fence it opens
    lines = [ln for p in parts for ln in p.splitlines() if ln.startswith("print(")]
    assert lines == code.splitlines()  # nothing lost, nothing repeated, in order


async def test_progress_text_is_sent_once_per_turn_when_configured(make_channel: Callable[..., Any],
                                                                   dt: FakeDingTalk, bus: MessageBus) -> None:
    channel = await make_channel(progressText="…")
    await dt.push(dt.robot_message("think", sender=OWNER))
    msg = await next_inbound(bus)
    from lucidgate.channels.messages import OutboundTyping

    for _ in range(2):
        await channel.send(OutboundTyping(Target.of(msg)))
    assert [(s.msgtype, s.text) for s in dt.sent] == [("text", "…")]


async def test_a_reply_after_a_restart_still_finds_its_chat(make_channel: Callable[..., Any],
                                                            dt: FakeDingTalk, bus: MessageBus) -> None:
    first = await make_channel()
    await dt.push(dt.robot_message("hi", sender=OWNER))
    msg = await next_inbound(bus)
    await first.stop()
    await make_channel()  # a new process would load state/dingtalk.json the same way
    await reply(bus, msg, "answer after the restart")
    await until(lambda: dt.sent, 10, what="the reply")
    assert (dt.sent[0].via, dt.sent[0].text) == ("webhook", "answer after the restart")


# ----------------------------------------------------------------------------- the stream


async def test_a_silent_stream_is_replaced_by_the_watchdog(make_channel: Callable[..., Any], dt: FakeDingTalk,
                                                           bus: MessageBus) -> None:
    channel = await make_channel(watchdogS=0.3, tuning={"ping_interval_s": 0.05})
    dt.mute()
    await dt.wait_connected(2)
    assert channel.stream.stale >= 1
    await dt.push(dt.robot_message("still there?", sender=OWNER))
    assert (await next_inbound(bus)).text == "still there?"


async def test_a_disconnect_request_opens_a_new_stream(make_channel: Callable[..., Any], dt: FakeDingTalk,
                                                       bus: MessageBus, caplog: pytest.LogCaptureFixture) -> None:
    await make_channel()
    ping = await dt.system("ping", {"opaque": "abc"})
    assert json.loads((await dt.acked(ping))["data"]) == {"opaque": "abc"}  # answered by the SDK
    assert not [r for r in caplog.records if "unknown message topic" in r.getMessage()]  # and not a warning
    await dt.system("disconnect")
    await dt.wait_connected(2)
    await dt.push(dt.robot_message("after the move", sender=OWNER))
    assert (await next_inbound(bus)).text == "after the move"


async def test_a_message_sent_while_the_gateway_was_away_arrives_once_it_is_back(
        make_channel: Callable[..., Any], dt: FakeDingTalk, bus: MessageBus) -> None:
    first = await make_channel()
    await first.stop()
    await until(lambda: dt.disconnected(), 10, what="the stream to close")
    frame = await dt.push(dt.robot_message("are you there?", sender=OWNER))  # nobody to ACK it yet
    await make_channel()
    assert (await dt.acked(frame))["code"] == 200
    assert (await next_inbound(bus)).text == "are you there?"
    assert bus.inbound_depth == 0


async def test_a_connection_open_request_that_hangs_is_given_up_and_tried_again(
        make_channel: Callable[..., Any], dt: FakeDingTalk, bus: MessageBus) -> None:
    dt.hang_opens = 1
    await make_channel(tuning={"connect_timeout_s": 0.3})  # waits for the stream to be up
    assert len(dt.opened) == 2 and dt.connections == 1
    await dt.push(dt.robot_message("hello after the stall", sender=OWNER))
    assert (await next_inbound(bus)).text == "hello after the stall"


async def test_a_stop_right_after_the_handshake_leaves_no_socket_open(make_config: Callable[..., Any],
                                                                       dt: FakeDingTalk, bus: MessageBus,
                                                                       workspace: Path) -> None:
    config = make_config(channels={"dingtalk": section(dt)})
    channel = DingTalkChannel(DingTalkSettings.from_section(config.channels.dingtalk), bus, workspace=workspace)
    await channel.start()
    await dt.wait_connected()  # the stand-in accepted; the client may still be mid-handshake
    await channel.stop()
    await until(dt.disconnected, 10, what="the socket to close")


async def test_bad_credentials_keep_retrying_without_failing_the_start(make_config: Callable[..., Any],
                                                                       dt: FakeDingTalk, bus: MessageBus,
                                                                       workspace: Path) -> None:
    config = make_config(channels={"dingtalk": section(dt, clientSecret="wrong-secret-0123456789")})
    channel = DingTalkChannel(DingTalkSettings.from_section(config.channels.dingtalk, reconnect_backoff_s=0.01),
                              bus, workspace=workspace)
    await channel.start()
    try:
        await until(lambda: len(dt.opened) >= 2, 10, what="a second attempt")
        assert dt.connections == 0 and not channel.stream.connected.is_set()
    finally:
        await channel.stop()


# ----------------------------------------------------------------------------- pure parts


def test_build_refuses_without_credentials(make_config: Callable[..., Any], workspace: Path) -> None:
    config = make_config(channels={"dingtalk": {"enabled": True, "clientId": CLIENT_ID}})
    with pytest.raises(ConfigError, match="clientSecret"):
        build(config, deps_at(MessageBus(), workspace))
    config = make_config(channels={"dingtalk": {"enabled": True}})
    with pytest.raises(ConfigError, match="clientId"):
        build(config, deps_at(MessageBus(), workspace))


def test_a_turn_names_the_sender_by_staff_id_and_reads_rich_text() -> None:
    data = {"msgId": "m1", "conversationId": "cid1", "conversationType": "1", "senderStaffId": "0123",
            "senderId": "$:LWCP_v1:$x", "msgtype": "richText",
            "content": {"richText": [{"text": "first"}, {"downloadCode": "img"}, {"text": "second"}]}}
    turn = parse_turn(data)
    assert turn is not None and (turn.sender_id, turn.text) == ("0123", "first\nsecond")
    outsider = parse_turn({**data, "senderStaffId": None})
    assert outsider is not None and outsider.sender_id == "$:LWCP_v1:$x"
    assert parse_turn({**data, "msgId": ""}) is None
    picture = parse_turn({**data, "msgtype": "picture", "content": {"downloadCode": "abc"}})
    assert picture is not None and "picture message" in picture.text


def test_markdown_out_drops_unsafe_links_and_shows_tables_as_text() -> None:
    reply = "# Plan\n**bold** [ok](https://x.test) [bad](javascript:alert(1))\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    (chunk,) = to_chunks(reply)
    assert chunk.startswith("# Plan\n\n**bold** [ok](https://x.test) bad\n")
    assert "```\na | b\n" in chunk and "javascript" not in chunk
