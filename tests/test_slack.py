"""The Slack channel: real slack-bolt / slack-sdk against a loopback fake of Slack.

HTTP Events mode posts requests signed exactly as Slack signs them to the channel's
router; Socket Mode runs the SDK's websocket client against the fake's websocket. The bus
is the real one with its durable inbox journal.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryUncertain
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, OutboundError, OutboundProgress, OutboundText, OutboundTyping, Target
from lucidgate.channels.pairing import PairingStore, default_path
from lucidgate.channels.routing import Router
from lucidgate.channels.slack import SlackChannel, SlackSettings, build
from lucidgate.channels.slack.format import as_command, parse_event, payload, to_chunks
from lucidgate.config.errors import ConfigError
from tests.channel_kit import deps_at
from tests.fakes.slack_api import FakeSlackAPI, event_callback
from tests.served import served_client

SECRET = "test-signing-secret"


# ----------------------------------------------------------------------------- fixtures


@pytest_asyncio.fixture
async def slack_api() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as api:
        yield api


@pytest_asyncio.fixture
async def bus(workspace: Path) -> AsyncIterator[MessageBus]:
    bus = MessageBus(inbox=InboxJournal(workspace / "state" / "inbox.jsonl"))
    await bus.start()
    yield bus
    await bus.stop()


@pytest.fixture
def slack_config(make_config: Callable[..., Any], slack_api: FakeSlackAPI) -> Callable[..., Any]:
    def build(**overrides: Any) -> Any:
        section = {
            "enabled": True, "botToken": slack_api.bot_token, "appToken": slack_api.app_token,
            "signingSecret": SECRET, "apiBase": slack_api.base_url, "mode": "http",
            "allowFrom": ["U_ALICE"], "owners": ["U_OWNER"],
        }
        section.update(overrides)
        return make_config(channels={"slack": section})

    return build


@pytest_asyncio.fixture
async def make_channel(
    slack_config: Callable[..., Any], bus: MessageBus, workspace: Path
) -> AsyncIterator[Callable[..., Any]]:
    started: list[SlackChannel] = []

    async def build(
        *, api_timeout_s: float = 5.0, ping_interval_s: float = 10.0, **overrides: Any
    ) -> SlackChannel:
        settings = SlackSettings.from_section(slack_config(**overrides).channels.slack, api_timeout_s=api_timeout_s,
                                              ping_interval_s=ping_interval_s, reconnect_backoff_s=0.05)
        channel = SlackChannel(settings, bus, workspace=workspace)
        await channel.start()
        started.append(channel)
        return channel

    yield build
    for channel in started:
        await channel.stop()


@pytest_asyncio.fixture
async def http_slack(make_channel: Callable[..., Any]) -> AsyncIterator[tuple[SlackChannel, httpx.AsyncClient]]:
    channel = await make_channel()
    app = FastAPI()
    app.include_router(channel.router())
    async with served_client(app) as client:
        yield channel, client


def sign(body: bytes, *, secret: str = SECRET, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends: ``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


async def post_event(client: httpx.AsyncClient, payload: dict[str, Any], *, retry: int | None = None,
                     **sign_args: Any) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", **sign(body, **sign_args)}
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return await client.post("/slack/events", content=body, headers=headers)


def dm(text: str, *, user: str = "U_ALICE", ts: str = "1700000001.000100", **extra: Any) -> dict[str, Any]:
    return {"type": "message", "channel": "D_ALICE", "channel_type": "im", "user": user,
            "text": text, "ts": ts, "client_msg_id": f"cm-{ts}", **extra}


def mention(text: str, *, user: str = "U_ALICE", ts: str = "1700000002.000200", **extra: Any) -> dict[str, Any]:
    return {"type": "app_mention", "channel": "C_GENERAL", "user": user,
            "text": f"<@UBOT> {text}", "ts": ts, **extra}


async def next_inbound(bus: MessageBus, timeout: float = 3.0, *, agent: str = "") -> InboundMessage:
    delivery = await asyncio.wait_for(bus.consume_inbound(agent), timeout)
    await bus.ack(delivery)
    return delivery.msg


# ----------------------------------------------------------------------------- pure helpers


def test_markdown_is_sent_as_standard_markdown() -> None:
    md = "# Plan\nSome **bold**, *italic*, ~~old~~ and [docs](https://x.test/a?b=1&c=2).\n- one\n- two"
    (chunk,) = to_chunks(md)
    assert chunk == (
        "# Plan\n\nSome **bold**, *italic*, ~~old~~ and [docs](https://x.test/a?b=1&c=2).\n\n- one\n- two"
    )
    body = payload(chunk)
    assert body["blocks"] == [{"type": "markdown", "text": chunk}]
    assert body["text"] == "Plan\n\nSome bold, italic, old and docs.\n\n• one\n• two"


def test_code_is_kept_verbatim_and_escapes_survive() -> None:
    md = "a < b & c \\*not italic\\*\n~~~python\nif a < b and **x**:\n    pass\n~~~\nuse `**raw**` here"
    chunks = to_chunks(md)
    assert chunks == [
        "a < b & c \\*not italic\\*\n\n```python\nif a < b and **x**:\n    pass\n```\n\nuse `**raw**` here"
    ]
    assert payload(chunks[0])["text"] == "a < b & c *not italic*\n\nif a < b and **x**:\n    pass\n\nuse **raw** here"


def test_split_prefers_paragraphs_and_never_breaks_a_code_block_silently() -> None:
    paragraphs = [f"paragraph {i} " + "word " * 150 for i in range(12)]
    code = "```\n" + "\n".join(f"line {i} = {i}" for i in range(500)) + "\n```"
    text = "\n\n".join(paragraphs[:6] + [code] + paragraphs[6:])
    chunks = to_chunks(text, 3900)
    assert len(chunks) > 3
    assert all(len(c) <= 3900 for c in chunks)
    assert all(c.count("```") % 2 == 0 for c in chunks)  # every piece of code is fenced
    prose = [c for c in chunks if "```" not in c]
    assert all(c.startswith("paragraph") for c in prose)  # cut between paragraphs
    joined = "\n".join(chunks)
    assert all(f"line {i} = {i}" in joined for i in range(500))
    assert all(p.strip() in joined for p in paragraphs)
    assert to_chunks("short") == ["short"] and to_chunks("   ") == []


def test_plain_text_commands() -> None:
    assert as_command("dream-log") == "/dream-log"
    assert as_command("/Status") == "/status"
    assert as_command("dream-restore abc123") == "/dream-restore abc123"
    assert as_command("new ideas for dinner") is None
    assert as_command("helpful") is None


@pytest.mark.parametrize("event", [
    dm("hi", bot_id="B1"),
    dm("hi", subtype="bot_message"),
    dm("hi", user="UBOT"),
    dm("hi", subtype="message_changed"),
    dm("hi", subtype="message_deleted"),
    dm("hi", subtype="channel_join"),
    {**dm("no mention"), "channel": "C_GENERAL", "channel_type": "channel"},
    {"type": "message", "channel": "D1", "channel_type": "im", "text": "no user", "ts": "1.2"},
])
def test_ignored_events(event: dict[str, Any]) -> None:
    assert parse_event(event, "UBOT") is None


def test_parse_thread_mention_and_file_share() -> None:
    parsed = parse_event(mention("hello", ts="5.5", thread_ts="4.4"), "UBOT")
    assert parsed is not None
    assert (parsed.chat_type, parsed.thread_id, parsed.text) == ("group", "4.4", "hello")
    shared = parse_event(dm("see file", subtype="file_share", files=[{"id": "F1"}]), "UBOT")
    assert shared is not None and shared.files == ({"id": "F1"},)
    assert parse_event(dm("a &lt;b&gt; &amp; c"), "UBOT").text == "a <b> & c"  # type: ignore[union-attr]


def test_config_errors_name_the_missing_keys(slack_config: Callable[..., Any], workspace: Path) -> None:
    cfg = slack_config(botToken="", mode="http")
    with pytest.raises(ConfigError, match="botToken"):
        build(cfg, deps_at(MessageBus(), workspace))
    cfg = slack_config(appToken="", mode="socket")
    with pytest.raises(ConfigError, match="appToken"):
        build(cfg, deps_at(MessageBus(), workspace))
    cfg = slack_config(signingSecret="", mode="http")
    with pytest.raises(ConfigError, match="signingSecret"):
        build(cfg, deps_at(MessageBus(), workspace))


@pytest.mark.parametrize("name", ["lucidgate.channels.slack", "lucidgate.channels.slack.sdk", "slack_sdk.socket_mode.aiohttp",
                                  "slack_sdk.web.async_slack_response", "slack_bolt.AsyncApp"])
def test_tokens_are_redacted_from_slack_logs(
    name: str, slack_config: Callable[..., Any], workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build(slack_config(), deps_at(MessageBus(), workspace))  # installs the filters
    log = logging.getLogger(name)
    with caplog.at_level(logging.DEBUG, logger=name):
        log.info("calling with %s and %s", "xoxb-123-456-abcDEF", "xapp-1-A1-xyz")
        try:
            raise RuntimeError("bad token xoxb-999-secret")
        except RuntimeError:
            log.exception("failed")
    text = caplog.text
    assert "xoxb-123" not in text and "xapp-1-A1" not in text and "xoxb-999" not in text
    assert "xoxb-***" in text and "xapp-***" in text


# ----------------------------------------------------------------------------- HTTP events mode


async def test_url_verification_is_answered(http_slack: tuple[SlackChannel, httpx.AsyncClient]) -> None:
    _, client = http_slack
    resp = await post_event(client, {"type": "url_verification", "challenge": "chal-123", "token": "t"})
    assert resp.status_code == 200
    assert "chal-123" in resp.text


async def test_bad_signature_and_stale_timestamp_are_rejected(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    payload = event_callback(dm("hello"))
    assert (await post_event(client, payload, secret="wrong-secret")).status_code == 401
    assert (await post_event(client, payload, timestamp=int(time.time()) - 600)).status_code == 401
    unsigned = await client.post("/slack/events", content=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    assert unsigned.status_code == 401
    assert bus.inbound_depth == 0


async def test_a_captured_request_replayed_is_not_a_second_message(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    body = json.dumps(event_callback(dm("pay the invoice", ts="9.1"), event_id="EvReplay")).encode()
    headers = {"Content-Type": "application/json", **sign(body)}
    assert (await client.post("/slack/events", content=body, headers=headers)).status_code == 200
    assert (await next_inbound(bus)).text == "pay the invoice"
    # The same bytes and signature again (no retry header: an attacker's replay, not Slack's retry).
    assert (await client.post("/slack/events", content=body, headers=headers)).status_code == 200
    # Re-signed with the captured timestamp moved back beyond five minutes: refused outright.
    stale = {"Content-Type": "application/json", **sign(body, timestamp=int(time.time()) - 301)}
    assert (await client.post("/slack/events", content=body, headers=stale)).status_code == 401
    await post_event(client, event_callback(dm("next", ts="9.2"), event_id="EvNext"))
    assert (await next_inbound(bus)).text == "next"  # the replay never became a message before it


async def test_oversized_body_is_refused(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    payload = event_callback(dm("x" * (1024 * 1024 + 10)))
    assert (await post_event(client, payload)).status_code == 413
    assert bus.inbound_depth == 0


async def test_dm_becomes_a_private_turn_and_retries_never_repeat_it(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    payload = event_callback(dm("hello there"), event_id="Ev1")
    assert (await post_event(client, payload)).status_code == 200
    msg = await next_inbound(bus)
    assert (msg.channel, msg.chat_id, msg.chat_type) == ("slack", "D_ALICE", "private")
    assert msg.sender_id == "U_ALICE" and msg.role == "guest"  # allowed, not an owner
    assert msg.text == "hello there" and msg.thread_id is None
    assert msg.session_key == "slack:D_ALICE"
    assert msg.message_id == "1700000001.000100"
    # Slack retries with the same event_id; a redelivery under a new event_id has the same ts.
    assert (await post_event(client, payload, retry=1)).status_code == 200
    again = event_callback(dm("hello there"), event_id="Ev1-redelivered")
    assert (await post_event(client, again)).status_code == 200
    assert bus.inbound_depth == 0


async def test_a_binding_by_account_routes_one_slack_workspaces_messages_to_its_agent(
    slack_config: Callable[..., Any], make_config: Callable[..., Any], workspace: Path, tmp_path: Path
) -> None:
    """Issue 41: a message's ``account`` is the Slack workspace (team id) it came from, so
    ``{"match": {"channel": "slack", "account": "T_WORK"}}`` sends that workspace's events to
    "work" while another team's go to the default agent."""
    config = make_config(agents={"list": [{"id": "home", "workspace": str(tmp_path / "home")},
                                          {"id": "work", "workspace": str(tmp_path / "work")}]},
                         bindings=[{"agent": "work", "match": {"channel": "slack", "account": "T_WORK"}}])
    routed = MessageBus(inbox=InboxJournal(tmp_path / "inbox.jsonl"), router=Router(config))
    await routed.start()
    channel = SlackChannel(SlackSettings.from_section(slack_config().channels.slack), routed, workspace=workspace)
    await channel.start()
    try:
        app = FastAPI()
        app.include_router(channel.router())
        async with served_client(app) as client:
            for team, ts in (("T_WORK", "1700000009.000100"), ("T_HOME", "1700000009.000200")):
                response = await post_event(client, event_callback(dm(f"from {team}", ts=ts), team=team))
                assert response.status_code == 200
        work = await next_inbound(routed, agent="work")
        home = await next_inbound(routed)
        assert (work.text, work.account, work.session_key) == ("from T_WORK", "T_WORK", "work:slack:D_ALICE")
        assert (home.text, home.account, home.session_key) == ("from T_HOME", "T_HOME", "slack:D_ALICE")
    finally:
        await channel.stop()
        await routed.stop()


async def test_channel_mention_is_a_thread_turn(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    assert (await post_event(client, event_callback(mention("what's up?")))).status_code == 200
    msg = await next_inbound(bus)
    assert (msg.chat_id, msg.chat_type, msg.text) == ("C_GENERAL", "group", "what's up?")
    assert msg.thread_id == "1700000002.000200"
    assert msg.session_key == "slack:C_GENERAL:1700000002.000200"
    in_thread = mention("and again", ts="1700000009.000900", thread_ts="1700000002.000200")
    await post_event(client, event_callback(in_thread))
    follow = await next_inbound(bus)
    assert follow.session_key == msg.session_key and follow.message_id == "1700000009.000900"


async def test_bots_edits_and_plain_channel_messages_are_ignored(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus, slack_api: FakeSlackAPI
) -> None:
    _, client = http_slack
    events = [
        dm("from a bot", bot_id="B9", ts="1.1"),
        dm("our own echo", user="UBOT", ts="1.2"),
        {"type": "message", "subtype": "message_changed", "channel": "D_ALICE", "channel_type": "im",
         "ts": "1.3", "message": {"user": "U_ALICE", "text": "edited", "ts": "1.0"}},
        {"type": "message", "subtype": "message_deleted", "channel": "D_ALICE", "channel_type": "im",
         "ts": "1.4", "deleted_ts": "1.0"},
        {**dm("chatter", ts="1.5"), "channel": "C_GENERAL", "channel_type": "channel"},
        {"type": "reaction_added", "user": "U_ALICE", "reaction": "+1", "item": {}},
    ]
    for event in events:
        assert (await post_event(client, event_callback(event))).status_code == 200
    assert bus.inbound_depth == 0
    assert slack_api.calls_to("chat.postMessage") == []


async def test_unknown_sender_gets_one_refusal_and_nothing_reaches_the_bus(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus, slack_api: FakeSlackAPI
) -> None:
    _, client = http_slack
    await post_event(client, event_callback(dm("let me in", user="U_MALLORY", ts="2.1")))
    await post_event(client, event_callback(dm("please", user="U_MALLORY", ts="2.2")))
    await bus.flush_outbound()  # both events were handled before their 200: all they sent is out
    posts = slack_api.calls_to("chat.postMessage")
    assert len(posts) == 1
    assert posts[0].params["channel"] == "D_ALICE"
    assert "only talk to" in posts[0].params["text"]
    assert bus.inbound_depth == 0
    # In a channel the refusal goes into the mention's thread.
    await post_event(client, event_callback(mention("hey", user="U_EVE", ts="2.5")))
    await slack_api.wait_until(lambda: len(slack_api.calls_to("chat.postMessage")) == 2)
    assert slack_api.calls_to("chat.postMessage")[1].params["thread_ts"] == "2.5"
    # Owners are always allowed, even though they are not in allowFrom.
    await post_event(client, event_callback(dm("owner here", user="U_OWNER", ts="2.3")))
    owner = await next_inbound(bus)
    assert (owner.sender_id, owner.role) == ("U_OWNER", "owner")  # the gate's role, on the message


async def test_refusal_null_means_silence(
    make_channel: Callable[..., Any], bus: MessageBus, slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel(refusal=None)
    app = FastAPI()
    app.include_router(channel.router())
    async with served_client(app) as client:
        assert (await post_event(client, event_callback(dm("hi", user="U_X")))).status_code == 200
    await bus.flush_outbound()
    assert slack_api.calls_to("chat.postMessage") == [] and bus.inbound_depth == 0


async def test_pairing_code_then_approval_lets_the_sender_in(
    make_channel: Callable[..., Any], bus: MessageBus, slack_api: FakeSlackAPI, workspace: Path
) -> None:
    channel = await make_channel(pairing=True)
    app = FastAPI()
    app.include_router(channel.router())
    async with served_client(app) as client:
        await post_event(client, event_callback(dm("hi", user="U_BOB", ts="3.1")))
        await slack_api.wait_until(lambda: len(slack_api.calls_to("chat.postMessage")) == 1)
        text = slack_api.calls_to("chat.postMessage")[0].params["text"]
        store = PairingStore(default_path(workspace))
        code = store.pending("slack")[0]["code"]
        assert code in text and bus.inbound_depth == 0
        assert store.approve(code) == ("slack", "U_BOB")
        await post_event(client, event_callback(dm("hi again", user="U_BOB", ts="3.2")))
        assert (await next_inbound(bus)).text == "hi again"


async def test_plain_text_commands_after_mention_and_in_dm(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    await post_event(client, event_callback(mention("dream-log")))
    assert (await next_inbound(bus)).text == "/dream-log"
    await post_event(client, event_callback(dm("status", ts="4.1")))
    assert (await next_inbound(bus)).text == "/status"
    await post_event(client, event_callback(dm("new ideas please", ts="4.2")))
    assert (await next_inbound(bus)).text == "new ideas please"


async def test_lucid_slash_command_is_acked_and_published(
    http_slack: tuple[SlackChannel, httpx.AsyncClient], bus: MessageBus
) -> None:
    _, client = http_slack
    for user, role in (("U_ALICE", "guest"), ("U_OWNER", "owner")):
        form = urlencode({"command": "/lucid", "text": "dream-log", "user_id": user, "channel_id": "D_ALICE",
                          "channel_name": "directmessage", "team_id": "T1", "trigger_id": "1.2.abc",
                          "response_url": "http://127.0.0.1:9/unused"}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(form)}
        resp = await client.post("/slack/events", content=form, headers=headers)
        assert resp.status_code == 200
        msg = await next_inbound(bus)
        assert (msg.text, msg.chat_type, msg.session_key, msg.account) == (
            "/dream-log", "private", "slack:D_ALICE", "T1")
        assert msg.role == role  # the gate's decision travels with the command


async def test_failed_publish_is_not_acked_and_a_retry_waits_for_the_first_attempt(
    workspace: Path, slack_config: Callable[..., Any]
) -> None:
    class GatedBus(MessageBus):
        """No inbox (so no durable dedupe): the first publish blocks, then fails."""

        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.calls = 0

        async def publish_inbound(self, msg: InboundMessage, *, timeout: float | None = None) -> bool:
            self.calls += 1
            if self.calls == 1:
                await self.gate.wait()
                raise OSError("disk full")
            return await super().publish_inbound(msg, timeout=timeout)

    gated = GatedBus()
    channel = SlackChannel(SlackSettings.from_section(slack_config().channels.slack), gated, workspace=workspace)
    await channel.start()
    try:
        app = FastAPI()
        app.include_router(channel.router())
        async with served_client(app) as client:
            payload = event_callback(dm("important"), event_id="EvFail")
            first = asyncio.create_task(post_event(client, payload))
            while gated.calls < 1:
                await asyncio.sleep(0.01)
            retry = asyncio.create_task(post_event(client, payload, retry=1))
            await asyncio.sleep(0.2)
            assert not retry.done()  # not acked while the first attempt is undecided
            gated.gate.set()
            assert (await first).status_code == 500  # not acked: Slack will retry
            assert (await retry).status_code == 200
            assert (await next_inbound(gated)).text == "important"
            # A later retry of the same event_id is dropped by the channel itself.
            assert (await post_event(client, payload, retry=2)).status_code == 200
        assert gated.inbound_depth == 0 and gated.calls == 2
    finally:
        await channel.stop()


# ----------------------------------------------------------------------------- files


async def test_shared_files_are_downloaded_with_the_bot_token(
    http_slack: tuple[SlackChannel, httpx.AsyncClient],
    bus: MessageBus,
    slack_api: FakeSlackAPI,
    workspace: Path,
) -> None:
    _, client = http_slack
    doc = slack_api.add_file("F1", "notes.txt", b"remember the milk")
    img = slack_api.add_file("F2", "cat.png", b"\x89PNG fake", mimetype="image/png")
    huge = slack_api.add_file("F3", "big.bin", b"x", size=25 * 1024 * 1024)
    foreign = {**slack_api.add_file("F4", "evil.txt", b"x"), "url_private_download": "http://127.0.0.2:9/steal"}
    event = dm("see attached", subtype="file_share", files=[doc, img, huge, foreign])
    assert (await post_event(client, event_callback(event))).status_code == 200
    msg = await next_inbound(bus)
    media_dir = workspace / "media" / "slack" / "D_ALICE"
    assert msg.media == (str(media_dir / "F1.txt"), str(media_dir / "F2.png"))
    assert (media_dir / "F1.txt").read_bytes() == b"remember the milk"
    assert f"[file: {media_dir / 'F1.txt'}]" in msg.text
    assert f"[image: {media_dir / 'F2.png'}]" in msg.text
    assert "big.bin (too large" in msg.text and "evil.txt (not downloaded)" in msg.text
    assert msg.text.startswith("see attached")
    # Only the two allowed downloads happened, each with the bot token.
    assert [auth for _, auth in slack_api.downloads] == [f"Bearer {slack_api.bot_token}"] * 2


# ----------------------------------------------------------------------------- outbound


async def test_reply_is_a_markdown_block_split_and_threaded(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel()
    body = "\n\n".join(f"**Part {i}**" + " text" * 300 for i in range(6))
    target = Target("slack", "C_GENERAL", "1700000002.000200", "1700000002.000200")
    await channel.send(OutboundText(target, body, in_reply_to="1700000002.000200"))
    posts = slack_api.calls_to("chat.postMessage")
    assert len(posts) >= 2
    assert all(p.params["thread_ts"] == "1700000002.000200" for p in posts)
    assert all(p.params["channel"] == "C_GENERAL" for p in posts)
    blocks = [p.params["blocks"] for p in posts]
    assert all(len(b) == 1 and b[0]["type"] == "markdown" and len(b[0]["text"]) <= 3900 for b in blocks)
    markdown = "\n\n".join(b[0]["text"] for b in blocks)
    assert markdown == body  # split between paragraphs, nothing lost or rewritten
    assert all(p.params["text"] == p.params["blocks"][0]["text"].replace("**", "") for p in posts)
    assert all(p.token == slack_api.bot_token for p in posts)


async def test_reply_through_the_stand_in_drops_unsafe_links_and_keeps_markup(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel()
    reply = ("Try [this](javascript:alert(1)) or [w](https://en.wikipedia.org/wiki/Foo_(bar)), ***now***"
             "\n\n~~~\nx < y\n~~~")
    await channel.send(OutboundText(Target("slack", "D_ALICE"), reply))
    (post,) = slack_api.calls_to("chat.postMessage")
    assert post.params["blocks"] == [{"type": "markdown", "text": (
        "Try this or [w](https://en.wikipedia.org/wiki/Foo_(bar)), ***now***\n\n```\nx < y\n```")}]
    assert post.params["text"] == "Try this or w, now\n\nx < y"
    assert "mrkdwn" not in post.params


async def test_previews_are_markdown_blocks_and_the_answer_replaces_them(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel(streaming=True)
    assert channel.previews is not None
    channel.previews.interval_s = 0
    target = Target("slack", "D_ALICE", None, "1700000001.000100")
    await channel.send(OutboundProgress(target, "", activity="running grep…"))
    await channel.send(OutboundProgress(target, "The **ans"))  # unfinished markup, as streamed
    answer = "The **answer** [x](javascript:alert(1))"
    await channel.send(OutboundText(target, answer, in_reply_to="1700000001.000100"))
    (placeholder,) = slack_api.calls_to("chat.postMessage")
    assert placeholder.params["blocks"] == [{"type": "markdown", "text": "_running grep…_"}]
    assert placeholder.params["text"] == "running grep…"
    updates = slack_api.calls_to("chat.update")
    assert [u.params["blocks"] for u in updates] == [  # a stray "**" is escaped: shown as written
        [{"type": "markdown", "text": "The \\*\\*ans"}], [{"type": "markdown", "text": "The **answer** x"}]]
    assert [u.params["text"] for u in updates] == ["The **ans", "The answer x"]


async def test_plain_replies_stay_plain_text(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel()
    await channel.send(OutboundText(Target("slack", "D_ALICE"), "Sorry, **not** you.", plain=True))
    (post,) = slack_api.calls_to("chat.postMessage")
    assert post.params["text"] == "Sorry, **not** you." and "blocks" not in post.params
    assert post.params["mrkdwn"] is False


async def test_typing_reaction_added_then_removed_with_the_reply(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel()
    target = Target("slack", "D_ALICE", None, "1700000001.000100")
    await channel.send(OutboundTyping(target))
    added = slack_api.calls_to("reactions.add")
    assert [(c.params["channel"], c.params["name"], c.params["timestamp"]) for c in added] == [
        ("D_ALICE", "eyes", "1700000001.000100")
    ]
    assert slack_api.calls_to("reactions.remove") == []
    await channel.send(OutboundError(target, "the model is unavailable"))
    removed = slack_api.calls_to("reactions.remove")
    assert [(c.params["channel"], c.params["timestamp"]) for c in removed] == [("D_ALICE", "1700000001.000100")]
    post = slack_api.calls_to("chat.postMessage")[0]
    assert "the model is unavailable" in post.params["text"] and "thread_ts" not in post.params
    assert slack_api.calls.index(removed[0]) > slack_api.calls.index(post)


async def test_rate_limit_retry_after_is_honoured(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel()
    slack_api.fail_next("chat.postMessage", status=429, retry_after=1)
    await channel.send(OutboundText(Target("slack", "D_ALICE"), "hello"))
    posts = slack_api.calls_to("chat.postMessage")
    assert len(posts) == 2
    assert posts[1].at - posts[0].at >= 0.95
    assert posts[1].params["text"] == "hello"
    assert channel.limiter.waits == [1.0]


async def test_timed_out_post_is_not_resent(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    channel = await make_channel(api_timeout_s=0.3)
    slack_api.delay_next("chat.postMessage", 1.0)
    with caplog.at_level(logging.WARNING), pytest.raises(DeliveryUncertain):
        # Not resent at once; the outbox (which owns retries) is told it is uncertain.
        await channel.send(OutboundText(Target("slack", "D_ALICE"), "maybe delivered"))
    await asyncio.sleep(1.0)
    assert len(slack_api.calls_to("chat.postMessage")) == 1
    assert "not resending" in caplog.text


async def test_a_permanent_refusal_is_a_typed_permanent_failure(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel()
    slack_api.fail_next("chat.postMessage", status=200, error="channel_not_found", retry_after=None)
    with pytest.raises(DeliveryFailed) as failed:  # the outbox dead-letters it
        await channel.send(OutboundText(Target("slack", "C_GONE"), "hello"))
    assert failed.value.permanent
    assert len(slack_api.calls_to("chat.postMessage")) == 1


# ----------------------------------------------------------------------------- socket mode


async def test_socket_mode_event_is_acked_and_published(
    make_channel: Callable[..., Any], bus: MessageBus, slack_api: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    channel = await make_channel(mode="socket")
    assert channel.socket is not None
    await asyncio.wait_for(channel.socket.connected.wait(), 5)
    opens = slack_api.calls_to("apps.connections.open")
    assert opens and opens[0].token == slack_api.app_token
    envelope = await slack_api.send_envelope(event_callback(dm("via socket", ts="6.1"), event_id="EvS1"))
    await slack_api.wait_until(lambda: envelope in slack_api.acked)
    msg = await next_inbound(bus)
    assert (msg.text, msg.session_key, msg.message_id) == ("via socket", "slack:D_ALICE", "6.1")
    # A retry of the same event is acked but is not a second turn.
    retry = await slack_api.send_envelope(event_callback(dm("via socket", ts="6.1"), event_id="EvS1"),
                                          retry_attempt=1)
    await slack_api.wait_until(lambda: retry in slack_api.acked)
    assert bus.inbound_depth == 0
    assert slack_api.bot_token not in caplog.text and slack_api.app_token not in caplog.text


def button_press(value: str, *, user: str, channel: str, action_ts: str) -> dict[str, Any]:
    return {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": user, "username": user.lower()},
            "channel": {"id": channel}, "trigger_id": f"t-{action_ts}",
            "container": {"type": "message", "channel_id": channel, "message_ts": "1.1", "thread_ts": "5.5"},
            "actions": [{"type": "button", "action_id": "lucid_press_0", "block_id": "b",
                         "text": {"type": "plain_text", "text": "Approve once"}, "value": value,
                         "action_ts": action_ts}]}


async def test_socket_mode_button_press_is_the_pressers_command(
    make_channel: Callable[..., Any], bus: MessageBus, slack_api: FakeSlackAPI
) -> None:
    """A press of our button arrives over the socket as an ``interactive`` envelope: acked,
    published as its command from the presser (the gate's role for *that* user), in the
    thread it was pressed in; a value that is not a command is acked and dropped."""
    channel = await make_channel(mode="socket")
    assert channel.socket is not None
    await asyncio.wait_for(channel.socket.connected.wait(), 5)
    for user, role in (("U_OWNER", "owner"), ("U_ALICE", "guest")):
        envelope = await slack_api.send_envelope(
            button_press("/approve abc", user=user, channel="C_GENERAL", action_ts=f"7.{len(user)}{role}"),
            type="interactive")
        await slack_api.wait_until(lambda: envelope in slack_api.acked)
        msg = await next_inbound(bus)
        assert (msg.text, msg.sender_id, msg.role, msg.chat_type, msg.session_key, msg.account) == \
            ("/approve abc", user, role, "group", "slack:C_GENERAL:5.5", "T1")
    envelope = await slack_api.send_envelope(
        button_press("approve abc", user="U_OWNER", channel="D_OWNER", action_ts="7.9"), type="interactive")
    await slack_api.wait_until(lambda: envelope in slack_api.acked)
    assert bus.inbound_depth == 0


async def test_socket_watchdog_reconnects_a_silent_socket(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    slack_api.silent = True
    channel = await make_channel(mode="socket", watchdogS=0.4)
    assert channel.socket is not None
    with caplog.at_level(logging.WARNING, logger="lucidgate.channels.slack.socket"):
        await slack_api.wait_until(lambda: slack_api.ws_connections >= 2, timeout=5)
    assert len(slack_api.calls_to("apps.connections.open")) >= 2
    assert "no events or pings" in caplog.text
    # Once the server is healthy again, the new socket carries events.
    slack_api.silent = False
    await slack_api.wait_until(lambda: slack_api.ws_connections >= 3, timeout=5)
    await asyncio.wait_for(channel.socket.connected.wait(), 5)


async def test_socket_outage_is_retried_and_logged_once(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(4):
        slack_api.fail_next("apps.connections.open", status=200, error="internal_error", retry_after=None)
    with caplog.at_level(logging.INFO, logger="lucidgate.channels.slack.socket"):
        channel = await make_channel(mode="socket")  # start() does not fail during an outage
        assert channel.socket is not None
        await asyncio.wait_for(channel.socket.connected.wait(), 5)
    assert len(slack_api.calls_to("apps.connections.open")) == 5
    warnings = [r for r in caplog.records if r.name == "lucidgate.channels.slack.socket" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    assert "connected again" in caplog.text


async def test_socket_closed_by_slack_is_reconnected_and_keeps_delivering(
    make_channel: Callable[..., Any], bus: MessageBus, slack_api: FakeSlackAPI
) -> None:
    channel = await make_channel(mode="socket")
    assert channel.socket is not None
    await asyncio.wait_for(channel.socket.connected.wait(), 5)
    await slack_api.drop_sockets()
    await slack_api.wait_until(lambda: slack_api.ws_connections >= 2, timeout=5)
    await asyncio.wait_for(channel.socket.connected.wait(), 5)
    envelope = await slack_api.send_envelope(event_callback(dm("after reconnect", ts="7.1")))
    await slack_api.wait_until(lambda: envelope in slack_api.acked)
    assert (await next_inbound(bus)).text == "after reconnect"
    assert len(slack_api.calls_to("apps.connections.open")) == 2


async def test_network_outage_is_logged_once_and_recovered(
    make_channel: Callable[..., Any], bus: MessageBus, slack_api: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    channel = await make_channel(mode="socket")
    assert channel.socket is not None
    await asyncio.wait_for(channel.socket.connected.wait(), 5)
    with caplog.at_level(logging.INFO):
        await slack_api.stop()  # Slack (and the network path to it) goes away
        for _ in range(250):
            if not channel.socket.connected.is_set():
                break
            await asyncio.sleep(0.02)
        assert not channel.socket.connected.is_set()
        await asyncio.sleep(0.5)  # several reconnect attempts fail meanwhile
        async with FakeSlackAPI(port=slack_api.port) as revived:
            await asyncio.wait_for(channel.socket.connected.wait(), 5)
            envelope = await revived.send_envelope(event_callback(dm("back again", ts="8.1")))
            await revived.wait_until(lambda: envelope in revived.acked)
            assert (await next_inbound(bus)).text == "back again"
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(problems) == 1, [r.getMessage() for r in problems]
    assert "unreachable" in problems[0].getMessage()
    assert "connected again" in caplog.text


def test_registry_builds_the_slack_channel(slack_config: Callable[..., Any], workspace: Path) -> None:
    from lucidgate.channels.base import Channel, HasOwners, HasRouter
    from lucidgate.channels.registry import build_channels

    built = build_channels(slack_config(), deps_at(MessageBus(), workspace))
    channel = built["slack"]
    assert isinstance(channel, Channel) and isinstance(channel, HasRouter) and isinstance(channel, HasOwners)
    assert channel.is_owner("U_OWNER") and not channel.is_owner("U_ALICE")
    assert "http mode" in channel.describe() and "xoxb" not in channel.describe()


async def test_a_reply_with_files_uploads_them_into_the_thread(
    make_channel: Callable[..., Any], slack_api: FakeSlackAPI, workspace: Path
) -> None:
    channel = await make_channel()
    (workspace / "out").mkdir()
    (workspace / "out" / "summary.csv").write_bytes(b"a,b\n1,2\n")
    (workspace / "out" / "photo.png").write_bytes(b"\x89PNG pixels")
    await channel.send(OutboundText(Target("slack", "C_TEAM", "1700000002.000200"), "Two files.",
                                    files=("out/summary.csv", "out/photo.png")))
    [post] = slack_api.calls_to("chat.postMessage")
    assert post.params["thread_ts"] == "1700000002.000200"
    assert [(f["channel"], f["thread_ts"], f["name"], f["data"]) for f in slack_api.shared] == [
        ("C_TEAM", "1700000002.000200", "summary.csv", b"a,b\n1,2\n"),
        ("C_TEAM", "1700000002.000200", "photo.png", b"\x89PNG pixels"),
    ]
