"""The Matrix channel against a real homeserver (Synapse on loopback, see ``tests.matrix_kit``).

Each test drives the real matrix-nio client inside ``MatrixChannel``, wired by
``build_gateway`` to the real agent loop and the fake LLM; the people on the other side are
plain client-API calls. Assertions are on what the homeserver holds (rooms, members,
events) and on what the model was asked.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio

from channels.matrix import build as build_matrix
from channels.matrix.channel import MatrixChannel
from channels.matrix.state import load_state
from config.schema import Config
from gateway.app import Gateway, build_gateway
from tests.fakes.llm import FakeLLMServer, Reply
from tests.matrix_kit import Homeserver, Person
from tests.waiting import until

REFUSAL = "Sorry, I only talk to people my owner has allowed."
TIMEOUT = 60.0

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
        config = make_config(agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False}}},
                             channels={"matrix": matrix})
        gw = build_gateway(config)
        gw.add_channel("matrix", build_matrix(config, gw.parts.bus, workspace=config.workspace))
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
    fake_llm.queue(Reply("Your cat is **Miso** & she says <meow>"))
    await start_gateway()
    room = await dm_with_bot(owner, bot)
    asked = await owner.send(room, "what is my cat called?")

    (answer,) = await bot_messages(owner, room, bot)
    content = answer["content"]
    assert content["msgtype"] == "m.notice"
    assert content["body"] == "Your cat is Miso & she says <meow>"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == "<p>Your cat is <strong>Miso</strong> &amp; she says &lt;meow&gt;</p>"
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
    assert "what is my cat called?" in json.dumps(fake_llm.requests[-1]["messages"])
    assert len(fake_llm.requests) == 1
