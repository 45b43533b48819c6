"""Per-guest budgets on a chat platform: each sender on a channel has a share of its own.

On the fake Telegram Bot API, with the guests' pool at 10,000 tokens and the default
``usage.guestShare`` (a fifth): one guest spends 3,500 tokens in a private chat and is then refused — also in a group,
where it is the same sender — with a reply saying when the budget resets, and no model call;
another guest in the same group and the owner are still answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
import pytest_asyncio

from lucidgate.channels import telegram as telegram_channel
from lucidgate.config.schema import Config
from lucidgate.gateway.app import Gateway, build_gateway
from tests.fakes.llm import FakeLLMServer, Reply
from tests.fakes.telegram_api import BOT_USERNAME, TOKEN, FakeTelegramAPI

OWNER, SPENDER, OTHER, GROUP = 42, 43, 44, -100777


@pytest_asyncio.fixture
async def tg() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as fake:
        yield fake


@pytest_asyncio.fixture
async def gateway(make_config: Callable[..., Config], tg: FakeTelegramAPI,
                  fake_llm: FakeLLMServer) -> AsyncIterator[Gateway]:
    config = make_config(
        agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False},
                             "memory": {"autoRecall": False, "search": {"enabled": False}}}},
        channels={"telegram": {"enabled": True, "token": TOKEN, "apiBase": tg.base_url,
                               "allowFrom": [str(SPENDER), str(OTHER)], "owners": [str(OWNER)],
                               "pollTimeoutS": 1, "watchdogS": 60}},
        usage={"guestDailyTokenBudget": 10_000})
    gw = build_gateway(config)
    gw.add_channel("telegram", telegram_channel.build(config, gw.channel_deps))
    async with gw:
        await tg.wait_for("deleteWebhook")
        yield gw


async def _answer(tg: FakeTelegramAPI, seen: int, chat: int) -> str:
    (*_, sent) = await tg.wait_for("sendMessage", seen + 1)
    assert sent.params["chat_id"] == str(chat), sent.params
    return str(sent.params["text"])


async def test_a_guest_past_its_share_is_refused_while_others_and_the_owner_are_answered(
        gateway: Gateway, tg: FakeTelegramAPI, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("a long answer", prompt_tokens=3_400, completion_tokens=100))
    tg.push_message(chat_id=SPENDER, text="tell me everything")
    assert await _answer(tg, 0, SPENDER) == "a long answer"
    calls = len(fake_llm.requests)

    tg.push_message(chat_id=SPENDER, text="and more")
    refused = await _answer(tg, 1, SPENDER)
    assert "usage.guestShare" in refused and "resets at 00:00 UTC" in refused, refused
    tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=SPENDER, text=f"@{BOT_USERNAME} hi all")
    in_group = await _answer(tg, 2, GROUP)
    assert "usage.guestShare" in in_group, in_group
    assert len(fake_llm.requests) == calls

    fake_llm.queue(Reply("hello, other guest"), Reply("hello, owner"))
    tg.push_message(chat_id=GROUP, chat_type="supergroup", sender_id=OTHER, text=f"@{BOT_USERNAME} hi")
    assert await _answer(tg, 3, GROUP) == "hello, other guest"
    tg.push_message(chat_id=OWNER, text="hi")
    assert await _answer(tg, 4, OWNER) == "hello, owner"
    usage = gateway.parts.usage
    assert usage.guest_total(f"telegram:{SPENDER}") == 3_500 and usage.guest_total(f"telegram:{OTHER}") > 0
