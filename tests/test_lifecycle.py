"""Gateway start/stop: the order of components, and a failed start undoing exactly what started.

Every part's start and stop is recorded in one list, so these tests see the real order the
one loop in gateway/lifecycle.py produces over the components the root registered — not a
count of calls.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.lifecycle import Lifecycle
from lucidgate.gateway.runtime import Gateway
from lucidgate.gateway.daemon.serve import GatewayServer, ListenError
from lucidgate.gateway.daemon.server import create_app


class RecordingChannel:
    def __init__(self, name: str, events: list[str], *, fails: bool = False) -> None:
        self.name = name
        self.events = events
        self.fails = fails

    async def start(self) -> None:
        self.events.append(f"{self.name}.start")
        if self.fails:
            raise RuntimeError(f"{self.name} refused the token")

    async def stop(self) -> None:
        self.events.append(f"{self.name}.stop")

    async def send(self, msg: Any) -> None:
        return None


def record_parts(gw: Gateway, events: list[str]) -> None:
    """Wrap the core parts' start/stop so they append to ``events`` and then do the real thing."""
    p = gw.parts

    def wrap(obj: Any, method: str, label: str) -> None:
        real = getattr(obj, method)

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            events.append(label)
            return await real(*args, **kwargs)

        setattr(obj, method, recorded)

    wrap(p.model, "start", "model.start")
    wrap(p.bus, "start", "bus.start")
    wrap(p.bus, "stop", "bus.stop")
    wrap(p.agent, "start", "agent.start")
    wrap(p.agent, "stop", "agent.stop")
    wrap(p.scheduler, "start", "scheduler.start")
    wrap(p.scheduler, "stop", "scheduler.stop")
    real_close = p.model.close

    def close() -> None:
        events.append("model.close")
        real_close()

    p.model.close = close  # type: ignore[method-assign]


def failing(label: str, events: list[str]) -> Callable[..., Any]:
    async def start(*args: Any, **kwargs: Any) -> None:
        events.append(label)
        raise RuntimeError(f"{label} failed")

    return start


async def test_parts_start_in_order_and_stop_in_reverse(make_config: Callable) -> None:
    events: list[str] = []
    gw = build_gateway(make_config())
    gw.add_channel("a", RecordingChannel("a", events))
    gw.add_channel("b", RecordingChannel("b", events))
    record_parts(gw, events)
    async with gw:
        assert gw.started.is_set()
        assert events == ["model.start", "bus.start", "a.start", "b.start", "agent.start", "scheduler.start"]
        events.clear()
    assert events == ["scheduler.stop", "agent.stop", "b.stop", "a.stop", "bus.stop", "model.close"]
    assert not gw.parts.bus.accepting


async def test_a_channel_that_fails_is_stopped_and_the_others_keep_serving(make_config: Callable) -> None:
    events: list[str] = []
    gw = build_gateway(make_config())
    gw.add_channel("a", RecordingChannel("a", events))
    gw.add_channel("b", RecordingChannel("b", events, fails=True))
    record_parts(gw, events)
    async with gw:
        assert gw.parts.scheduler.running
        assert list(gw.channels) == ["a"]
        assert gw.failed_channels == {"b": "b refused the token"}
        # The failed channel was stopped right away (releasing whatever it half-opened).
        assert events[events.index("b.start") + 1] == "b.stop"
        events.clear()
    assert "b.stop" not in events  # not stopped a second time
    assert events.index("a.stop") < events.index("bus.stop")


async def test_a_core_part_failing_stops_exactly_what_started_in_reverse(make_config: Callable) -> None:
    events: list[str] = []
    gw = build_gateway(make_config())
    gw.add_channel("a", RecordingChannel("a", events))
    gw.add_channel("b", RecordingChannel("b", events))
    record_parts(gw, events)
    gw.parts.scheduler.start = failing("scheduler.start", events)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="scheduler.start failed"):
        await gw.start()
    assert events == ["model.start", "bus.start", "a.start", "b.start", "agent.start", "scheduler.start",
                      "agent.stop", "b.stop", "a.stop", "bus.stop", "model.close"]
    assert not gw.started.is_set() and not gw.parts.bus.accepting
    events.clear()
    await gw.stop()  # a stop after a failed start has nothing left to do
    assert events == []


async def test_the_model_client_failing_starts_nothing_else(make_config: Callable) -> None:
    events: list[str] = []
    gw = build_gateway(make_config())
    gw.add_channel("a", RecordingChannel("a", events))
    record_parts(gw, events)
    gw.parts.model.start = failing("model.start", events)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="model.start failed"):
        await gw.start()
    assert events == ["model.start"]


async def test_a_busy_port_fails_before_anything_starts(make_config: Callable) -> None:
    events: list[str] = []
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        config = make_config(gateway={"host": "127.0.0.1", "port": taken.getsockname()[1]})
        gw = build_gateway(config, http=True)
        gw.add_channel("a", RecordingChannel("a", events))
        record_parts(gw, events)
        with pytest.raises(ListenError, match="gateway.port"):
            GatewayServer(config, app=create_app(config, gateway=gw), access_log=False)
    finally:
        taken.close()
    assert events == [] and not gw.started.is_set()


async def test_channels_cannot_be_added_once_started(make_config: Callable) -> None:
    gw = build_gateway(make_config())
    async with gw:
        with pytest.raises(RuntimeError, match="before the gateway starts"):
            gw.add_channel("late", RecordingChannel("late", []))


def test_modes_choose_channels_and_jobs(make_config: Callable) -> None:
    config = make_config(channels={"webhook": {"enabled": True, "token": "t" * 32}})
    daemon = build_gateway(config, "daemon")
    assert {"webhook", "cli"} <= set(daemon.channels)
    agent = build_gateway(config, "agent", on_unsolicited=print)
    assert list(agent.channels) == ["cli"]
    assert build_gateway(config).channels == {}


class Recorded:
    """A component that records its start and stop (and can refuse to start)."""

    def __init__(self, name: str, events: list[str], *, fails: bool = False) -> None:
        self.name, self.events, self.fails = name, events, fails

    async def start(self) -> None:
        self.events.append(f"{self.name}.start")
        if self.fails:
            raise RuntimeError(f"{self.name} refused")

    async def stop(self) -> None:
        self.events.append(f"{self.name}.stop")


def record_every_component(gw: Gateway, events: list[str]) -> list[str]:
    """Wrap each registered component's start and stop (on the object, so the lifecycle's own
    loop calls the wrapper); returns the names in registration order."""
    for entry in gw.components:
        component: Any = entry.component
        for verb in ("start", "stop"):
            real = getattr(component, verb)

            async def recorded(real: Any = real, label: str = f"{entry.name}.{verb}") -> None:
                events.append(label)
                await real()

            setattr(component, verb, recorded)
    return [entry.name for entry in gw.components]


async def test_every_registered_component_stops_in_reverse_of_its_start(make_config: Callable) -> None:
    events: list[str] = []
    gw = build_gateway(make_config())
    gw.add_channel("a", RecordingChannel("a", []))
    gw.add_channel("b", RecordingChannel("b", []))
    names = record_every_component(gw, events)
    # The root's order: the workspace first, the channels between the bus and the flush of
    # their replies, the agent and then the scheduler last.
    assert names[:2] == ["workspace", "history"]
    assert names.index("provider") < names.index("bus") < names.index("a") < names.index("b") \
        < names.index("outbound flush") < names.index("agent") < names.index("scheduler") == len(names) - 1
    async with gw:
        assert events == [f"{n}.start" for n in names]
        events.clear()
    assert events == [f"{n}.stop" for n in reversed(names)]


async def test_readiness_asks_every_component_that_runs(make_config: Callable) -> None:
    gw = build_gateway(make_config())
    gw.add_channel("a", RecordingChannel("a", []))
    gw.add_channel("b", RecordingChannel("b", [], fails=True))
    async with gw:
        ready = await gw.readiness()
        assert list(ready) == [c.name for c in gw.components if c.name != "b"]  # the refused one is not asked
        assert all(check.ok for check in ready.values()), ready
        assert ready["bus"].detail == "accepting messages" and ready["provider"].detail == gw.parts.config.agent.model
        gw.parts.bus.close_intake()
        assert (await gw.readiness())["bus"].ok is False


async def test_a_failing_component_undoes_the_started_ones_in_reverse_and_reraises() -> None:
    events: list[str] = []
    life = Lifecycle()
    life.add("first", Recorded("first", events))
    life.group("channels")
    life.add("third", Recorded("third", events, fails=True))
    life.add("never", Recorded("never", events))
    # Added to the group after later components: still started in the group's place.
    life.add_to("channels", "tolerated", Recorded("tolerated", events, fails=True))
    life.add_to("channels", "second", Recorded("second", events))
    aborted: list[str] = []
    with pytest.raises(RuntimeError, match="third refused"):
        await life.start(on_failure=lambda: aborted.append(f"after {events[-1]}"))
    assert events == ["first.start", "tolerated.start", "tolerated.stop", "second.start", "third.start",
                      "second.stop", "first.stop"]
    assert aborted == ["after third.start"]  # before anything is undone
    assert life.failed == {"tolerated": "tolerated refused"}
    events.clear()
    await life.stop()  # nothing left to stop
    assert events == []


async def test_a_stop_that_fails_does_not_keep_the_rest_running() -> None:
    events: list[str] = []

    class BrokenStop(Recorded):
        async def stop(self) -> None:
            await super().stop()
            raise OSError("disk gone")

    life = Lifecycle()
    life.add("a", Recorded("a", events))
    life.add("b", BrokenStop("b", events))
    life.add("c", Recorded("c", events))
    await life.start()
    await life.stop()
    assert events[3:] == ["c.stop", "b.stop", "a.stop"]


async def test_components_are_registered_only_before_start() -> None:
    life = Lifecycle()
    life.add("a", Recorded("a", []))
    with pytest.raises(ValueError, match="already registered"):
        life.add("a", Recorded("a", []))
    await life.start()
    with pytest.raises(RuntimeError, match="before the gateway starts"):
        life.add("late", Recorded("late", []))
    await life.stop()
