"""The durable outbox: real TelegramChannel + bus + SQLite outbox against the fake Bot API.

What is proven here: a final reply is on disk before the first send; an outage does not lose
it (restart resends it, exactly once); a 429 longer than the limiter accepts is waited out by
the outbox; a permanent refusal is dead-lettered once; a deadline ends retries; per-chat order
holds; a refusal to a stranger that meets a long flood wait never stalls intake.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from lucidgate.channels._ratelimit import OutboundLimiter
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import OutboundText, Target, TurnUsage
from lucidgate.channels.outbox import Outbox, read_counts
from lucidgate.channels.telegram import TelegramChannel, TelegramSettings
from lucidgate.channels.telegram.send import classify
from tests.fakes.telegram_api import TOKEN, FakeTelegramAPI
from tests.waiting import until

OWNER = 4242


@pytest_asyncio.fixture
async def tg() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as fake:
        yield fake


def limiter(max_wait_s: float = 300.0) -> OutboundLimiter:
    return OutboundLimiter("telegram", classify, rate_per_s=1000, burst=1000, per_key_rate_per_s=1000,
                           per_key_burst=1000, backoff_s=0.02, max_wait_s=max_wait_s)


class Rig:
    """One 'process': a bus with the workspace's outbox and a started Telegram channel."""

    def __init__(self, workspace: Path, tg: FakeTelegramAPI, make_config: Any) -> None:
        self.workspace, self.tg, self.make_config = workspace, tg, make_config
        self.bus: MessageBus | None = None
        self.channel: TelegramChannel | None = None

    async def up(self, *, deadline_s: float = 3600.0, max_wait_s: float = 300.0,
                 cfg: dict[str, Any] | None = None, agent_workspaces: dict[str, Path] | None = None) -> MessageBus:
        outbox = Outbox(self.workspace / "state" / "outbox.sqlite", deadlines_s={"telegram": deadline_s})
        self.bus = MessageBus(inbox=InboxJournal(self.workspace / "inbox.jsonl"), outbox=outbox,
                              retry_backoff_s=0.05, agent_workspaces=agent_workspaces)
        await self.bus.start()
        section = {"enabled": True, "token": TOKEN, "apiBase": self.tg.base_url, "allowFrom": [str(OWNER)],
                   "owners": [str(OWNER)], "pollTimeoutS": 1, **(cfg or {})}
        config = self.make_config(channels={"telegram": section})
        settings = TelegramSettings.from_section(config.channels.telegram, retry_base_s=0.02,
                                                 request_timeout_s=3.0)
        self.channel = TelegramChannel(settings, self.bus, workspace=self.workspace, limiter=limiter(max_wait_s))
        await self.channel.start()
        return self.bus

    async def down(self) -> None:
        """Stop like a crash as far as the outbox can tell: pending items are left pending."""
        assert self.bus is not None and self.channel is not None
        self.bus.unsubscribe("telegram")
        await self.channel.stop()
        await self.bus.stop()

    def counts(self) -> dict[str, int]:
        counts = read_counts(self.workspace / "state" / "outbox.sqlite")
        assert counts is not None
        return counts


@pytest_asyncio.fixture
async def rig(workspace: Path, tg: FakeTelegramAPI, make_config: Any) -> AsyncIterator[Rig]:
    r = Rig(workspace, tg, make_config)
    yield r
    if r.bus is not None and r.bus.has_route("telegram"):
        await r.down()



def sent_texts(tg: FakeTelegramAPI) -> list[str]:
    return [m["text"] for m in tg.messages.values()]


def reply(text: str, chat: int = OWNER) -> OutboundText:
    return OutboundText(Target("telegram", str(chat)), text, plain=True)


async def test_a_reply_during_an_outage_survives_a_restart_and_arrives_exactly_once(rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up()
    tg.set_outage("500")
    await bus.publish_outbound(reply("the answer is 42"))
    assert rig.counts()["pending"] == 1  # on disk before it could be sent
    await until(lambda: len(tg.calls_to("sendMessage")) >= 5)  # retried through the outage
    await rig.down()  # the process goes away mid-outage
    tg.set_outage(None)
    bus = await rig.up()
    await until(lambda: rig.counts()["delivered"] == 1)
    await bus.flush_outbound()
    assert sent_texts(tg) == ["the answer is 42"]
    assert rig.counts() == {"pending": 0, "delivered": 1, "dead": 0}


async def test_a_delivered_reply_is_never_resent_after_a_restart(rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up()
    await bus.publish_outbound(reply("once"))
    await until(lambda: rig.counts()["delivered"] == 1)
    await rig.down()
    bus = await rig.up()
    await bus.publish_outbound(reply("twice?"))
    await until(lambda: rig.counts()["delivered"] == 2)
    assert sent_texts(tg) == ["once", "twice?"]


async def test_a_long_flood_wait_is_waited_out_by_the_outbox(rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up(max_wait_s=0.1)  # the limiter gives up at once; the outbox waits retry_after
    tg.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    started = time.monotonic()
    await bus.publish_outbound(reply("patience"))
    await until(lambda: rig.counts()["delivered"] == 1)
    first, second = tg.calls_to("sendMessage")
    assert second.at - first.at >= 1.0 and time.monotonic() - started >= 1.0
    assert sent_texts(tg) == ["patience"]


async def test_a_permanent_refusal_is_dead_lettered_once(rig: Rig, tg: FakeTelegramAPI,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    bus = await rig.up()
    tg.fail("sendMessage", 400, "Bad Request: chat not found")
    with caplog.at_level(logging.WARNING):
        await bus.publish_outbound(reply("to nowhere", chat=999))
        await until(lambda: rig.counts()["dead"] == 1)
    assert len(tg.calls_to("sendMessage")) == 1
    # What /status reports: one dead letter in the outbox, and this process counted one.
    assert await bus.outbox_counts() == {"pending": 0, "delivered": 0, "dead": 1} and bus.delivery.dead == 1
    assert [r for r in caplog.records if "dead-lettered" in r.getMessage()].__len__() == 1
    await rig.down()
    await rig.up()
    await rig.bus.flush_outbound()  # type: ignore[union-attr]
    assert len(tg.calls_to("sendMessage")) == 1  # a dead letter is not retried at the next start


async def test_retries_end_at_the_deadline(rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up(deadline_s=0.5)
    tg.set_outage("500")
    await bus.publish_outbound(reply("too late"))
    await until(lambda: rig.counts()["dead"] == 1)
    assert tg.messages == {}


async def test_per_chat_order_holds_across_retries(rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up()
    tg.fail("sendMessage", 500, "Internal Server Error", times=6)  # more than the limiter's attempts
    for i in range(3):
        await bus.publish_outbound(reply(f"part {i}"))
    await until(lambda: rig.counts()["delivered"] == 3)
    assert sent_texts(tg) == ["part 0", "part 1", "part 2"]


async def test_a_split_reply_resumes_at_the_part_not_yet_accepted(rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up()
    long = "A" * 4000 + "\n\n" + "B" * 3000  # two Telegram messages
    seen: list[int] = []

    def fail_second(call: Any) -> None:
        if call.method == "sendMessage":
            seen.append(1)
            if len(seen) == 2:  # the second part meets an outage long enough to exhaust the limiter
                tg.fail("sendMessage", 500, "Internal Server Error", times=5)

    tg.on_call.append(fail_second)
    await bus.publish_outbound(reply(long))
    await until(lambda: rig.counts()["delivered"] == 1)
    texts = sent_texts(tg)
    assert len(texts) == 2 and texts[0].startswith("A") and texts[1].startswith("B")


async def test_a_refusal_waiting_out_a_flood_limit_is_durable_and_never_stalls_intake(
        rig: Rig, tg: FakeTelegramAPI) -> None:
    bus = await rig.up(max_wait_s=1000)
    tg.fail("sendMessage", 429, "Too Many Requests: retry after 250", retry_after=250)
    tg.push_message(chat_id=666, text="let me in", message_id=9001)
    await tg.wait_for("sendMessage", 1)
    await until(lambda: rig.counts()["pending"] == 1)  # the refusal is in the outbox
    tg.push_message(chat_id=OWNER, text="still there?")
    delivery = await asyncio.wait_for(bus.consume_inbound(), 30)
    assert delivery.msg.text == "still there?"
    await bus.ack(delivery)


def test_lucid_status_counts_pending_and_dead_letters(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from lucidgate.gateway.cli import build_app
    from tests.test_cli import write_config

    workspace = tmp_path / "ws"
    config_path = write_config(tmp_path / "config.json", workspace, "http://127.0.0.1:9/v1")
    outbox = Outbox(workspace / "state" / "outbox.sqlite", deadlines_s={"telegram": 24 * 3600.0})
    dead = outbox.record(reply("gone"))
    outbox.dead(dead.id, "chat not found")
    outbox.record(reply("waiting"))
    outbox.close()
    result = CliRunner().invoke(build_app(), ["status", "-c", str(config_path)])
    assert result.exit_code == 0, result.output
    assert "outbox:    1 pending, 1 dead-lettered" in result.output


async def test_the_bus_purges_week_old_delivered_items_and_keeps_the_rest(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "outbox.sqlite"
    outbox = Outbox(path, deadlines_s={"telegram": 24 * 3600.0})
    old_done = outbox.record(OutboundText(Target("telegram", "1"), "old and delivered"))
    outbox.delivered(old_done.id)
    old_pending = outbox.record(OutboundText(Target("telegram", "1"), "old, never delivered"))
    fresh_done = outbox.record(OutboundText(Target("telegram", "1"), "fresh and delivered"))
    outbox.delivered(fresh_done.id)
    old_dead = outbox.record(OutboundText(Target("telegram", "2"), "old dead letter"))
    outbox.dead(old_dead.id, "chat not found")  # kept: /status and the owner still need to see it
    outbox.close()
    week_ago = time.time() - 8 * 86400
    with sqlite3.connect(path) as db:
        db.execute("UPDATE outbox SET created_at = ? WHERE id IN (?, ?, ?)",
                   (week_ago, old_done.id, old_pending.id, old_dead.id))
    bus = MessageBus(outbox=Outbox(path, deadlines_s={"telegram": 24 * 3600.0}))
    await bus.start()
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while (await bus.outbox_counts() or {}).get("delivered") != 1:
            assert asyncio.get_running_loop().time() < deadline, "the purge did not run"
            await asyncio.sleep(0.02)
        assert await bus.outbox_counts() == {"pending": 1, "delivered": 1, "dead": 1}
    finally:
        await bus.stop()


async def test_a_flush_does_not_wait_for_messages_queued_behind_a_backoff(tmp_path: Path) -> None:
    """Shutdown flushes the lanes; a chat waiting out a 30 s retry delay holds what queued
    behind it, durable, instead of holding the shutdown."""
    from lucidgate.channels._ratelimit import DeliveryRetry

    outbox = Outbox(tmp_path / "outbox.sqlite", deadlines_s={"telegram": 24 * 3600.0})
    bus = MessageBus(outbox=outbox)
    await bus.start()
    attempts: list[str] = []

    async def receiver_down(msg: Any) -> None:
        attempts.append(msg.text)
        raise DeliveryRetry("receiver down", after_s=30)

    try:
        bus.subscribe("hook", receiver_down)
        chat = Target("hook", "c1")
        await bus.publish_outbound(OutboundText(chat, "first"))
        await until(lambda: attempts, timeout=30, what="the first attempt")
        await bus.publish_outbound(OutboundText(chat, "second"))  # queued behind the backoff
        await asyncio.wait_for(bus.flush_outbound(), 10)  # returns: nothing can go out now
        assert attempts == ["first"]
        assert [i.msg.text for i in await asyncio.to_thread(outbox.pending, "hook")] == ["first", "second"]
    finally:
        await bus.stop()
        outbox.close()


def test_an_answer_resent_after_a_restart_keeps_its_turns_usage(tmp_path: Path) -> None:
    """The OpenAI endpoint reports a turn's tokens from its answer: a pending answer read back
    from the outbox (after a restart) still carries them."""
    path = tmp_path / "outbox.sqlite"
    outbox = Outbox(path, deadlines_s={"openai": 3600.0})
    outbox.record(OutboundText(Target("openai", "desk"), "the answer", in_reply_to="m1", usage=TurnUsage(230, 12)))
    outbox.record(OutboundText(Target("openai", "desk"), "a command's reply", in_reply_to="m2"))
    outbox.close()
    again = Outbox(path, deadlines_s={"openai": 3600.0})
    assert [item.msg.usage for item in again.pending("openai")] == [TurnUsage(230, 12), None]
    again.close()
