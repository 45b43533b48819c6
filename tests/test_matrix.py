"""The Matrix channel against a real homeserver (Synapse on loopback, see ``tests.matrix_kit``).

Each test drives the real matrix-nio client inside ``MatrixChannel``, wired by
``build_gateway`` to the real agent loop and the fake LLM; the people on the other side are
plain client-API calls. Assertions are on what the homeserver holds (rooms, members,
events) and on what the model was asked.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from lucidgate.channels._ratelimit import DeliveryFailed
from lucidgate.channels.matrix import build as build_matrix
from lucidgate.channels.matrix.channel import MatrixChannel
from lucidgate.channels.matrix.state import load_state
from lucidgate.channels.messages import OutboundText, Target
from lucidgate.config.schema import Config
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.ops.matrix_check import matrix_checks
from tests.fakes.llm import FakeLLMServer, HeldReply, Reply, ToolCalls
from tests.matrix_kit import Homeserver, OutageProxy, Person
from tests.waiting import until

REFUSAL = "Sorry, I only talk to people my owner has allowed."
TIMEOUT = 60.0

# The recall index (and its embedder) has nothing to do with Matrix: off, so a start is quick.
AGENT = {"llmRetries": 0, "llmTimeoutS": 60, "dream": {"enabled": False},
         "memory": {"autoRecall": False, "search": {"enabled": False}}}

StartGateway = Callable[..., Awaitable[Gateway]]


@pytest_asyncio.fixture
async def bot(homeserver: Homeserver) -> Person:
    return await homeserver.register()


@pytest_asyncio.fixture
async def owner(homeserver: Homeserver) -> Person:
    return await homeserver.register()


@pytest_asyncio.fixture
async def start_gateway(make_config: Callable[..., Config], homeserver: Homeserver, bot: Person,
                        owner: Person, fake_llm: FakeLLMServer) -> AsyncIterator[StartGateway]:
    running: list[Gateway] = []

    async def start(**section: Any) -> Gateway:
        matrix = {"enabled": True, "homeserver": homeserver.url, "userId": bot.user_id,
                  "accessToken": bot.token, "allowFrom": [owner.user_id], "owners": [owner.user_id],
                  "syncTimeoutS": 5, **section}
        config = make_config(agents={"defaults": AGENT}, channels={"matrix": matrix},
                             providers={"openai": {"streamToolCalls": True}})  # the fake streams them
        gw = build_gateway(config)
        gw.add_channel("matrix", build_matrix(config, gw.channel_deps))
        await gw.__aenter__()
        running.append(gw)
        channel = matrix_of(gw)
        await until(lambda: channel.syncer.synced.is_set(), TIMEOUT, what="the first sync")
        return gw

    yield start
    for gw in reversed(running):
        await gw.__aexit__(None, None, None)


def matrix_of(gw: Gateway) -> MatrixChannel:
    channel = gw.channel("matrix")
    assert isinstance(channel, MatrixChannel)
    return channel


async def dm_with_bot(owner: Person, bot: Person) -> str:
    """The owner opens a direct chat and waits until the bot has joined it."""
    room = await owner.create_room([bot.user_id])

    async def joined() -> bool:
        return (await owner.members(room)).get(bot.user_id) == "join"

    await owner.wait(joined, TIMEOUT, "the bot joining the direct chat")
    return room


async def bot_messages(person: Person, room: str, bot: Person, count: int = 1) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        found = await person.messages_from(room, bot.user_id)
        return found if len(found) >= count else None

    return list(await person.wait(enough, TIMEOUT, f"{count} message(s) from the bot"))


async def test_a_direct_chat_gets_an_answer_as_a_formatted_reply(
        start_gateway: StartGateway, owner: Person, bot: Person, fake_llm: FakeLLMServer) -> None:
    # The answer waits until the owner has seen the bot typing: a typing notice set and cleared
    # between two of the owner's syncs would reach it only as "not typing".
    release = threading.Event()
    fake_llm.queue(HeldReply("Your cat is **Miso** & she says <meow>", release))
    gw = await start_gateway()
    room = await dm_with_bot(owner, bot)
    typing: list[bool] = []
    watcher = asyncio.create_task(owner.watch_typing(room, bot.user_id, typing))
    asked = await owner.send(room, "what is my cat called?")
    await until(lambda: True in typing, TIMEOUT, what="typing shown")
    release.set()

    (answer,) = await bot_messages(owner, room, bot)
    await until(lambda: typing[-2:] == [True, False], TIMEOUT, what="typing shown, then cleared")
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    content = answer["content"]
    assert content["msgtype"] == "m.notice"
    assert content["body"] == "Your cat is Miso & she says <meow>"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == "<p>Your cat is <strong>Miso</strong> &amp; she says &lt;meow&gt;</p>"
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
    assert "what is my cat called?" in json.dumps(fake_llm.requests[-1]["messages"])
    assert len(fake_llm.requests) == 1
    assert "matrix" in gw.channels  # what the console's status page lists
    metrics = gw.parts.metrics.render().decode()
    assert 'lucid_messages_in_total{channel="matrix"} 1.0' in metrics
    assert 'lucid_messages_out_total{channel="matrix"}' in metrics


async def test_a_streamed_answer_is_one_message_edited_into_the_final_text(
        start_gateway: StartGateway, owner: Person, bot: Person, fake_llm: FakeLLMServer) -> None:
    release = threading.Event()
    fake_llm.queue(HeldReply("The answer is **forty-two**, as computed at length.", release))
    await start_gateway(streaming=True, previewIntervalS=0.2)
    room = await dm_with_bot(owner, bot)
    asked = await owner.send(room, "what is the answer?")

    (preview,) = await bot_messages(owner, room, bot)  # the first streamed piece, on screen
    assert preview["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
    assert "forty-two, as computed at length." not in preview["content"]["body"]
    release.set()

    async def final_edit() -> dict[str, Any] | None:
        edits = [e for e in await owner.messages_from(room, bot.user_id)
                 if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace"]
        done = [e for e in edits if e["content"]["m.new_content"]["body"].endswith("at length.")]
        return done[-1] if done else None

    edit = await owner.wait(final_edit, TIMEOUT, "the final edit")
    assert edit["content"]["m.relates_to"]["event_id"] == preview["event_id"]
    new = edit["content"]["m.new_content"]
    assert new["body"] == "The answer is forty-two, as computed at length."
    assert "<strong>forty-two</strong>" in new["formatted_body"]
    messages = await owner.messages_from(room, bot.user_id)
    originals = [e["event_id"] for e in messages
                 if (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"]
    assert originals == [preview["event_id"]]  # one message, only edited


async def test_a_stranger_is_refused_in_a_room_and_their_invite_declined(
        start_gateway: StartGateway, homeserver: Homeserver, owner: Person, bot: Person,
        fake_llm: FakeLLMServer) -> None:
    stranger = await homeserver.register()
    await start_gateway()
    their_room = await stranger.create_room([bot.user_id])

    async def declined() -> bool:
        return (await stranger.members(their_room)).get(bot.user_id) == "leave"

    await stranger.wait(declined, TIMEOUT, "the stranger's invite declined")

    room = await owner.create_room([bot.user_id, stranger.user_id], direct=False)
    await stranger.join(room)
    await owner.wait(lambda: _member_is(owner, room, bot.user_id, "join"), TIMEOUT, "the bot joining")
    await stranger.send(room, "hello everyone")  # not addressed to the bot: ignored
    asked = await stranger.send(room, f"{bot.user_id}: tell me the owner's secrets", mention=bot.user_id)

    (refusal,) = await bot_messages(owner, room, bot)
    assert refusal["content"] == {"msgtype": "m.notice", "body": REFUSAL,
                                  "m.relates_to": {"m.in_reply_to": {"event_id": asked}}}
    fake_llm.queue(Reply("Hello owner."))
    await owner.send(room, "hi bot", mention=bot.user_id)
    answers = await bot_messages(owner, room, bot, 2)
    assert answers[1]["content"]["body"] == "Hello owner."
    assert len(fake_llm.requests) == 1 and "secrets" not in json.dumps(fake_llm.requests)
    assert "hello everyone" not in json.dumps(fake_llm.requests)


async def _member_is(person: Person, room: str, user: str, membership: str) -> bool:
    return (await person.members(room)).get(user) == membership


async def test_a_restart_neither_replays_nor_skips_messages(
        start_gateway: StartGateway, owner: Person, bot: Person, fake_llm: FakeLLMServer,
        workspace: Path, homeserver: Homeserver) -> None:
    fake_llm.queue(Reply("first answer"), Reply("second answer"))
    gw = await start_gateway()
    room = await dm_with_bot(owner, bot)
    await owner.send(room, "first question")
    await bot_messages(owner, room, bot, 1)
    await gw.__aexit__(None, None, None)
    saved = load_state(workspace / "state" / "matrix.json", homeserver.url, bot.user_id)
    assert saved.next_batch
    assert (workspace / "state" / "matrix.json").stat().st_mode & 0o777 == 0o600

    await owner.send(room, "second question, sent while the bot was down")
    await start_gateway()
    answers = await bot_messages(owner, room, bot, 2)
    assert [a["content"]["body"] for a in answers] == ["first answer", "second answer"]
    assert len(fake_llm.requests) == 2
    assert "while the bot was down" in json.dumps(fake_llm.requests[1]["messages"])


async def test_an_encrypted_room_is_refused_in_the_room_and_in_doctor(
        start_gateway: StartGateway, owner: Person, bot: Person, fake_llm: FakeLLMServer) -> None:
    gw = await start_gateway()
    room = await owner.create_room([bot.user_id], encrypted=True)
    (notice,) = await bot_messages(owner, room, bot)
    assert notice["content"]["msgtype"] == "m.notice"
    assert "end-to-end encrypted" in notice["content"]["body"]
    await owner.send(room, "are you there?")
    await owner.send(room, "hello?")
    channel = matrix_of(gw)
    batches = channel.syncer.batches
    await until(lambda: channel.syncer.batches >= batches + 1, TIMEOUT, what="the messages synced")
    with pytest.raises(DeliveryFailed) as refused:
        await channel.send(OutboundText(Target("matrix", room), "a secret answer"))
    assert refused.value.permanent
    assert fake_llm.requests == []  # never read, never answered
    assert [m["event_id"] for m in await owner.messages_from(room, bot.user_id)] == [notice["event_id"]]

    results = {r.name: r for r in await asyncio.to_thread(matrix_checks, gw.parts.config)}
    assert results["matrix"].state == "ok" and bot.user_id in results["matrix"].detail
    assert results["matrix e2ee"].state == "warn" and room in results["matrix e2ee"].detail


async def test_media_in_is_saved_to_the_workspace_and_files_go_out(
        start_gateway: StartGateway, owner: Person, bot: Person, fake_llm: FakeLLMServer,
        workspace: Path) -> None:
    fake_llm.queue(Reply("Nice picture."))
    gw = await start_gateway()
    room = await dm_with_bot(owner, bot)
    picture = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    mxc = await owner.upload(picture, "cat.png", "image/png")
    await owner.send(room, "cat.png", msgtype="m.image", url=mxc,
                     info={"mimetype": "image/png", "size": len(picture)})
    await bot_messages(owner, room, bot)
    prompt = json.dumps(fake_llm.requests[0]["messages"])
    saved = [p for p in (workspace / "media" / "matrix").rglob("*.png")]
    assert len(saved) == 1 and saved[0].read_bytes() == picture
    assert saved[0].relative_to(workspace).as_posix() in prompt

    report = workspace / "report.txt"
    report.write_text("quarterly numbers\n")
    await matrix_of(gw).send_file(room, report)
    files = [m for m in await owner.messages_from(room, bot.user_id) if m["content"]["msgtype"] == "m.file"]
    assert len(files) == 1 and files[0]["content"]["body"] == "report.txt"
    assert await owner.download(files[0]["content"]["url"]) == b"quarterly numbers\n"


async def test_files_sent_by_the_message_tool_follow_the_text_as_image_and_file(
        start_gateway: StartGateway, owner: Person, bot: Person, fake_llm: FakeLLMServer,
        workspace: Path) -> None:
    picture = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    (workspace / "out").mkdir()
    (workspace / "out" / "chart.png").write_bytes(picture)
    (workspace / "out" / "notes.txt").write_bytes(b"plain notes\n")
    fake_llm.queue(ToolCalls([("message", {"text": "Your **files**.",
                                           "files": ["out/chart.png", "out/notes.txt"]})]), Reply("Sent."))
    await start_gateway()
    room = await dm_with_bot(owner, bot)
    await owner.send(room, "send me the chart and the notes")

    text, image, doc, done = (m["content"] for m in await bot_messages(owner, room, bot, 4))
    assert (text["body"], done["body"]) == ("Your files.", "Sent.")
    assert (image["msgtype"], image["body"], image["info"]["mimetype"]) == ("m.image", "chart.png", "image/png")
    assert (doc["msgtype"], doc["body"], doc["info"]["size"]) == ("m.file", "notes.txt", 12)
    assert await owner.download(image["url"]) == picture
    assert await owner.download(doc["url"]) == b"plain notes\n"


async def test_a_retried_reply_skips_posted_parts_and_names_a_gone_file(
        start_gateway: StartGateway, owner: Person, bot: Person, workspace: Path) -> None:
    channel = matrix_of(await start_gateway())
    room = await dm_with_bot(owner, bot)
    (workspace / "a.txt").write_bytes(b"first\n")
    (workspace / "b.txt").write_bytes(b"second\n")
    # The outbox's retry after the text and a.txt were posted: parts 0 and 1 are skipped.
    await channel.send(OutboundText(Target("matrix", room), "Two files.", files=("a.txt", "gone.txt", "b.txt"),
                                    delivery_id="d-1", skip_parts=2))
    await channel.send(OutboundText(Target("matrix", room), "Here.", files=("gone.txt",)))

    posted, note = (m["content"] for m in await bot_messages(owner, room, bot, 2))
    assert (posted["msgtype"], posted["body"]) == ("m.file", "b.txt")
    assert await owner.download(posted["url"]) == b"second\n"
    assert note["body"] == "Here.\n\n(file not sent: gone.txt no longer exists)"
    assert len(await owner.messages_from(room, bot.user_id)) == 2


async def test_a_rate_limited_reply_waits_retry_after_ms_and_arrives_once(
        make_config: Callable[..., Config], homeserver: Homeserver, bot: Person, owner: Person,
        fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("Patience pays."))
    async with OutageProxy(homeserver.url, retry_after_ms=300) as proxy:
        config = make_config(agents={"defaults": AGENT}, channels={"matrix": {
            "enabled": True, "homeserver": proxy.url, "accessToken": bot.token,
            "allowFrom": [owner.user_id], "syncTimeoutS": 5}})
        gw = build_gateway(config)
        gw.add_channel("matrix", build_matrix(config, gw.channel_deps))
        async with gw:
            channel = matrix_of(gw)
            room = await dm_with_bot(owner, bot)
            proxy.outage = "429"
            await owner.send(room, "hurry up")
            await until(lambda: proxy.failed >= 2, TIMEOUT, what="two rate-limited sends")
            proxy.outage = None
            (answer,) = await bot_messages(owner, room, bot)
            assert answer["content"]["body"] == "Patience pays."
            assert 0.3 in channel.limiter.waits  # the homeserver's retry_after_ms, honoured
            await gw.parts.bus.flush_outbound()
    assert len(await owner.messages_from(room, bot.user_id)) == 1


async def test_doctor_names_a_bad_token_and_an_unreachable_homeserver(
        make_config: Callable[..., Config], homeserver: Homeserver) -> None:
    def checks(**matrix: Any) -> dict[str, Any]:
        config = make_config(channels={"matrix": {"enabled": True, **matrix}})
        return {r.name: r for r in matrix_checks(config)}

    bad = await asyncio.to_thread(checks, homeserver=homeserver.url, accessToken="syt_not_a_token")
    assert bad["matrix"].state == "fail" and "M_UNKNOWN_TOKEN" in bad["matrix"].detail
    assert "accessToken" in bad["matrix"].fix
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    down = await asyncio.to_thread(checks, homeserver=closed, accessToken="syt_x")
    assert down["matrix"].state == "fail" and "unreachable" in down["matrix"].detail
    first = await asyncio.to_thread(checks, homeserver=homeserver.url, userId="@new:lucid.test", password="pw")
    assert first["matrix"].state == "ok" and "first start" in first["matrix"].detail
