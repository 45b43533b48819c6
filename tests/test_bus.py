"""The bus and its inbox journal: durable intake, dedupe, back-pressure, routing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lucidgate.channels.bus import BusClosed, BusFull, MessageBus
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, OutboundText, Target
from tests.waiting import until


def msg(i: int, chat: str = "1") -> InboundMessage:
    return InboundMessage(channel="t", chat_id=chat, sender_id="u", text=f"m{i}", message_id=str(i))


async def test_journal_survives_restart_and_dedupes(tmp_path: Path) -> None:
    bus = MessageBus(inbox=InboxJournal(tmp_path / "inbox.jsonl"))
    await bus.start()
    assert await bus.publish_inbound(msg(1)) is True
    assert await bus.publish_inbound(msg(1)) is False  # same platform id: duplicate
    first = await bus.consume_inbound()
    await bus.ack(first)
    assert await bus.publish_inbound(msg(2)) is True
    await bus.stop()  # m2 was never acked
    bus = MessageBus(inbox=InboxJournal(tmp_path / "inbox.jsonl"))
    await bus.start()
    replay = await asyncio.wait_for(bus.consume_inbound(), 1)
    assert replay.msg.text == "m2" and bus.inbound_depth == 0
    assert await bus.publish_inbound(msg(1)) is False  # still remembered after a restart
    await bus.stop()


async def test_full_queue_refuses_and_forgets(tmp_path: Path) -> None:
    bus = MessageBus(maxsize=1, inbox=InboxJournal(tmp_path / "inbox.jsonl"))
    await bus.start()
    await bus.publish_inbound(msg(1))
    with pytest.raises(BusFull):
        await bus.publish_inbound(msg(2), timeout=0.05)
    await bus.ack(await bus.consume_inbound())
    # the refused message is not a duplicate: the platform's retry is accepted
    assert await bus.publish_inbound(msg(2), timeout=0.05) is True
    await bus.stop()
    bus = MessageBus(inbox=InboxJournal(tmp_path / "inbox.jsonl"))
    await bus.start()
    replay = await asyncio.wait_for(bus.consume_inbound(), 1)
    assert replay.msg.text == "m2" and bus.inbound_depth == 0  # m2 once, m1 done
    await bus.stop()


async def test_closed_intake_refuses(tmp_path: Path) -> None:
    bus = MessageBus()
    await bus.start()
    bus.close_intake()
    with pytest.raises(BusClosed):
        await bus.publish_inbound(msg(1))
    await bus.stop()


async def test_corrupt_journal_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    path.write_text('{"id": "a", "msg": {"channel": "t", "chat_id": "1", "sender_id": "u", "text": "ok"}}\n'
                    '{"id": "b", "msg": {broken\n')
    bus = MessageBus(inbox=InboxJournal(path))
    await bus.start()
    replay = await asyncio.wait_for(bus.consume_inbound(), 1)
    assert replay.msg.text == "ok" and bus.inbound_depth == 0
    await bus.stop()


async def test_slow_channel_does_not_delay_another() -> None:
    bus = MessageBus()
    await bus.start()
    fast: list[str] = []
    slow: list[str] = []
    release = asyncio.Event()

    async def slow_send(m: object) -> None:
        slow.append("entered")
        await release.wait()
        slow.append("sent")

    async def fast_send(m: OutboundText) -> None:
        fast.append(m.text)

    bus.subscribe("slow", slow_send)
    bus.subscribe("fast", fast_send)
    await bus.publish_outbound(OutboundText(Target("slow", "1"), "stuck"))
    await bus.publish_outbound(OutboundText(Target("fast", "1"), "through"))
    await until(lambda: fast == ["through"], 30)
    assert slow == ["entered"]  # delivered while the slow channel's send was still stuck
    release.set()
    await bus.stop()


def test_journal_compacts_while_running_and_stays_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lucidgate.channels.inbox as inbox_module

    monkeypatch.setattr(inbox_module, "COMPACT_EVERY", 50)
    journal = InboxJournal(tmp_path / "inbox.jsonl")
    journal.open()
    kept = journal.append(msg(0, chat="keep"))
    for i in range(1, 500):
        receipt = journal.append(msg(i))
        assert receipt is not None
        journal.done(receipt)
    lines = (tmp_path / "inbox.jsonl").read_text().splitlines()
    assert len(lines) < 50 + 500 + 60  # compacted: not two lines per message for all 500
    assert oct((tmp_path / "inbox.jsonl").stat().st_mode & 0o777) == "0o600"
    assert journal.seen(msg(3).dedupe_id)  # dedupe ids survive compaction
    journal.close()
    replay = InboxJournal(tmp_path / "inbox.jsonl").open()
    assert [entry_id for entry_id, _ in replay] == [kept]


async def test_the_recorded_hook_sees_durable_messages_and_a_failing_hook_loses_nothing(tmp_path) -> None:
    from lucidgate.channels.messages import OutboundProgress
    from lucidgate.channels.outbox import Outbox

    outbox = Outbox(tmp_path / "outbox.sqlite", deadlines_s={"telegram": 24 * 3600.0})
    bus = MessageBus(outbox=outbox)
    await bus.start()
    seen: list[str] = []
    delivered: list[str] = []

    async def hook(msg: Any) -> None:
        seen.append(msg.text)
        assert [i.msg.text for i in outbox.pending("hook")][-1] == msg.text  # already on disk
        if msg.text == "boom":
            raise RuntimeError("a broken hook")

    async def channel(msg: Any) -> None:
        if msg.kind == "text":
            delivered.append(msg.text)

    try:
        bus.subscribe("hook", channel)
        bus.on_recorded("hook", hook)
        chat = Target("hook", "c1")
        await bus.publish_outbound(OutboundProgress(chat, "preview"))  # best-effort: not recorded, no hook
        await bus.publish_outbound(OutboundText(chat, "boom"))
        await bus.publish_outbound(OutboundText(chat, "fine"))
        await bus.flush_outbound()
        assert seen == ["boom", "fine"]
        assert delivered == ["boom", "fine"]  # the failing hook did not stop the delivery
        bus.on_recorded("hook", None)
        await bus.publish_outbound(OutboundText(chat, "after"))
        await bus.flush_outbound()
        assert seen == ["boom", "fine"] and delivered[-1] == "after"
    finally:
        await bus.stop()
        outbox.close()


def test_a_forget_compacts_the_journal_so_the_forgotten_text_does_not_linger(tmp_path: Path) -> None:
    """Handled lines stay until a compaction; a forget brings one on at the next handled
    message, and another once the messages pending at the forget are handled."""
    from lucidgate.memory.tombstones import Tombstones

    def run(*, aware: bool) -> list[str]:
        ws = tmp_path / ("aware" if aware else "plain")
        stones = Tombstones(ws)
        journal = InboxJournal(ws / "inbox.jsonl", forgotten_version=stones.version if aware else None)
        journal.open()
        def said(n: int, text: str) -> InboundMessage:
            return InboundMessage(channel="t", chat_id="1", sender_id="u", text=text, message_id=str(n))

        first = journal.append(said(1, "my door code is 8812"))
        assert first is not None
        journal.done(first)
        waiting = journal.append(said(2, "and the garage is 8812 too"))
        stones.add("8812")
        third = journal.append(said(3, "thanks"))
        assert waiting is not None and third is not None
        journal.done(third)
        after_forget = (ws / "inbox.jsonl").read_text()
        journal.done(waiting)
        drained = (ws / "inbox.jsonl").read_text()
        journal.close()
        return [after_forget, drained]

    after_forget, drained = run(aware=True)
    assert "door code" not in after_forget and "garage is 8812" in after_forget  # still pending
    assert "8812" not in drained
    assert [] == [m.text for _, m in InboxJournal(tmp_path / "aware" / "inbox.jsonl").open()]
    plain_after, plain_drained = run(aware=False)  # the control: without the hook both stay
    assert "door code is 8812" in plain_drained and "garage is 8812" in plain_drained
