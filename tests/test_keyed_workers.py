"""Keyed workers: the shared primitive, and the two exit races it closed (a message stranded
behind a reminder note; delivery lanes that never retired). Race windows are opened with
events inside real hooks, never with sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lucidgate.channels.bus import Delivery, MessageBus
from lucidgate.config.keyed import KeyedWorkers
from lucidgate.channels.messages import InboundMessage, OutboundText, Target
from lucidgate.channels.outbox import Outbox
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.daemon.serve import GatewayServer
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply


def _tasks(prefix: str) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(prefix) and not t.done()]


# ----------------------------------------------------------------------------- the primitive


async def test_items_of_a_key_run_in_order_and_keys_run_concurrently() -> None:
    seen: list[tuple[str, int]] = []
    gate = asyncio.Event()

    async def handle(key: str, item: int) -> None:
        if key == "a" and item == 1:
            await gate.wait()  # "a" is held up; "b" must not wait for it
        seen.append((key, item))
        if key == "b":
            gate.set()

    workers: KeyedWorkers[int] = KeyedWorkers("t", handle, idle_s=60)
    for item in (1, 2, 3):
        workers.put("a", item)
    workers.put("b", 1)
    await asyncio.wait_for(workers.wait_idle(), 5)
    assert seen == [("b", 1), ("a", 1), ("a", 2), ("a", 3)]
    assert workers.workers == 2 and workers.queued == 0 and not workers.busy("a")
    await asyncio.gather(*workers.cancel(), return_exceptions=True)


async def test_an_idle_worker_retires_and_a_put_at_retirement_starts_a_new_one() -> None:
    handled: list[int] = []
    retired: list[str] = []
    workers: KeyedWorkers[int]

    async def handle(_key: str, item: int) -> None:
        handled.append(item)

    def on_retire(key: str) -> None:
        retired.append(key)
        if len(retired) == 1:
            workers.put(key, 2)  # arrives exactly as the first worker leaves

    workers = KeyedWorkers("retire", handle, idle_s=0.01, on_retire=on_retire)
    workers.put("k", 1)
    first = _tasks("retire-k")
    await asyncio.wait_for(asyncio.wait(first), 5)
    second = _tasks("retire-k")
    assert len(second) == 1 and second[0] not in first
    await asyncio.wait_for(asyncio.wait(second), 5)
    assert handled == [1, 2] and retired == ["k", "k"]
    assert workers.workers == 0 and "k" not in workers


async def test_the_worker_count_is_bounded_and_waiting_keys_get_an_idle_slot() -> None:
    handled: list[str] = []
    hold = asyncio.Event()

    async def handle(key: str, _item: int) -> None:
        if key == "a":
            await hold.wait()
        handled.append(key)

    workers: KeyedWorkers[int] = KeyedWorkers("t", handle, idle_s=3600, limit=2)
    workers.put("a", 1)
    workers.put("b", 1)
    workers.put("c", 1)  # over the limit: waits, then takes the slot "b" leaves idle
    assert workers.workers == 2
    await asyncio.wait_for(_until(lambda: "c" in handled), 5)
    assert handled == ["b", "c"] and workers.workers == 2 and "b" not in workers
    hold.set()
    await asyncio.wait_for(workers.wait_idle(), 5)
    assert sorted(handled) == ["a", "b", "c"]
    await asyncio.gather(*workers.cancel(), return_exceptions=True)


async def test_two_keys_arriving_together_at_the_cap_each_get_an_idle_workers_slot() -> None:
    """Both workers sit idle; "c" and "d" arrive in the same tick. Each must take one of the
    two idle slots: "d" may not wait behind "c"'s work while "b"'s worker idles."""
    handled: list[str] = []
    c_running, release_c = asyncio.Event(), asyncio.Event()

    async def handle(key: str, _item: int) -> None:
        if key == "c":
            c_running.set()
            await release_c.wait()
        handled.append(key)

    workers: KeyedWorkers[int] = KeyedWorkers("t", handle, idle_s=3600, limit=2)
    workers.put("a", 1)
    workers.put("b", 1)
    await asyncio.wait_for(workers.wait_idle(), 5)  # both idle, holding the two slots
    workers.put("c", 1)
    workers.put("d", 1)
    try:
        await asyncio.wait_for(c_running.wait(), 5)
        await asyncio.wait_for(_until(lambda: "d" in handled), 5)  # while "c" is still held
    finally:
        release_c.set()
    await asyncio.wait_for(workers.wait_idle(), 5)
    assert handled == ["a", "b", "d", "c"] and workers.workers == 2
    await asyncio.gather(*workers.cancel(), return_exceptions=True)


async def test_a_key_carries_its_state_while_it_has_a_worker() -> None:
    seen: list[object] = []
    workers: KeyedWorkers[int, list[int]]

    async def handle(key: str, item: int) -> None:
        state = workers.state(key)
        assert state is not None
        state.append(item)
        seen.append(list(state))

    workers = KeyedWorkers("t", handle, idle_s=0, new_state=lambda _key: [])
    workers.put("k", 1)
    workers.put("k", 2)
    assert workers.queued_items() == [("k", 1), ("k", 2)]
    await asyncio.wait_for(workers.wait_idle(), 5)
    await asyncio.wait_for(_until(lambda: "k" not in workers), 5)  # retired: its state went with it
    assert seen == [[1], [1, 2]] and workers.state("k") is None
    workers.put("k", 3)
    await asyncio.wait_for(_until(lambda: len(seen) == 3), 5)
    assert seen[-1] == [3]  # a new worker starts from a new state


async def test_a_resting_key_does_not_hold_up_wait_idle_and_a_failure_does_not_kill_the_worker() -> None:
    resting, wake = asyncio.Event(), asyncio.Event()
    handled: list[int] = []
    workers: KeyedWorkers[int]

    async def handle(key: str, item: int) -> None:
        if item == 0:
            raise RuntimeError("boom")
        if item == 1:
            with workers.resting(key):
                resting.set()
                await wake.wait()
        handled.append(item)

    workers = KeyedWorkers("t", handle, idle_s=60)
    workers.put("k", 0)
    workers.put("k", 1)
    await asyncio.wait_for(resting.wait(), 5)
    await asyncio.wait_for(workers.wait_idle(), 5)  # returns although item 1 is in hand
    assert workers.busy("k")
    wake.set()
    workers.put("k", 2)
    await asyncio.wait_for(_until(lambda: handled == [1, 2]), 5)
    await asyncio.gather(*workers.cancel(), return_exceptions=True)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0)


# ----------------------------------------------------------------------------- the agent's race


async def test_a_message_arriving_while_a_reminder_note_is_written_is_answered(
    fake_llm: FakeLLMServer, make_config: Callable[..., Any]
) -> None:
    """The session worker wrote pending reminder notes after its queue drained and then
    exited; a message queued during that write was left with no worker."""
    fake_llm.queue(Reply("first"), Reply("second"))
    gw = build_gateway(make_config())
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    agent, sessions = gw.parts.agent, gw.parts.sessions
    writing_note, release = asyncio.Event(), asyncio.Event()
    real_append = sessions.append

    async def append(session: Any, *lines: dict[str, Any], sync: bool = False) -> None:
        if any(line.get("content") == "one" for line in lines):
            await agent.record_reminder(session.key, "reminder: water the plants")  # mid-turn
        if any(line.get("kind") == "reminder" for line in lines):
            writing_note.set()
            await release.wait()
        await real_append(session, *lines, sync=sync)

    sessions.append = append  # type: ignore[method-assign]
    async with gw:
        await channel.say("one", sender_id="local")
        await asyncio.wait_for(writing_note.wait(), 10)
        agent.submit(Delivery(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="two",
                                             message_id="m2")))
        release.set()
        replies = await channel.wait_replies(2, timeout=10)
    assert [r.text for r in replies] == ["first", "second"]


# ----------------------------------------------------------------------------- the lanes' leak


async def test_delivery_lanes_retire_when_idle_and_forget_what_they_sent(tmp_path: Path) -> None:
    async with MessageBus(outbox=Outbox(tmp_path / "outbox.sqlite", deadlines_s={"telegram": 24 * 3600.0}), lane_idle_s=0.01) as bus:
        channel = FakeChannel(bus, name="lanes")
        await channel.start()
        for chat in range(50):
            await bus.publish_outbound(OutboundText(Target("lanes", f"c{chat}"), "hi"))
        await bus.flush_outbound()
        assert len(channel.sent) == 50
        lanes = _tasks("out-lanes-")
        assert lanes, "no lane task seen"
        await asyncio.wait_for(asyncio.wait(lanes), 5)  # today: they never end
        assert bus.delivery_lanes == 0 and bus.delivery_in_flight == 0  # `_seen` grew forever
        await bus.publish_outbound(OutboundText(Target("lanes", "c0"), "again"))  # a retired chat comes back
        await bus.flush_outbound()
        assert channel.sent[-1].text == "again"


# ----------------------------------------------------------------------------- a burst, then quiet


async def test_a_burst_of_webhook_chats_then_idle_brings_workers_and_lanes_back_to_baseline(
    make_config: Callable[..., Any], fake_llm: FakeLLMServer
) -> None:
    """Hundreds of distinct client-chosen chat ids (a slash command each: the full path through
    the bus, a session worker and a delivery lane, without a model call), then quiet: the
    /metrics gauges return to where they started. The bench does 5,000."""
    token = "wh-token-0123456789abcdef"
    config = make_config(
        channels={"webhook": {"token": token, "callbackSecret": "cb-secret-0123456789abcdef",
                              "rateLimitPerMin": 100_000, "rateLimitPerCredentialPerMin": 100_000,
                              "rateLimitGlobalPerMin": 100_000}},
        gateway={"port": 0, "shutdownGraceS": 2, "workerIdleS": 0.05})
    chats = 200
    async with GatewayServer(config, access_log=False) as server, httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        before = _gauges((await client.get("/metrics")).text)
        for start in range(0, chats, 50):
            answers = await asyncio.gather(*(
                client.post("/v1/messages", json={"chat_id": f"burst-{n}", "sender_id": "u", "text": "/help",
                                                  "wait": False})
                for n in range(start, start + 50)))
            assert all(a.status_code == 202 for a in answers), answers[0].text
        parts = server.state.gateway.parts
        await parts.agent.idle()
        await parts.bus.flush_outbound()
        counts = await parts.bus.outbox_counts()
        assert counts == {"pending": 0, "delivered": chats, "dead": 0}  # every chat went through a lane
        # Every worker and lane alive now retires after workerIdleS; none is replaced.
        left = _tasks("session-") + _tasks("out-webhook-")
        if left:
            await asyncio.wait_for(asyncio.wait(left), 10)
        after = _gauges((await client.get("/metrics")).text)
    assert before == {"lucid_session_workers": 0.0, "lucid_delivery_lanes": 0.0}
    assert after == before


def _gauges(text: str) -> dict[str, float]:
    wanted = ("lucid_session_workers", "lucid_delivery_lanes")
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.split(" ")[0] in wanted}
