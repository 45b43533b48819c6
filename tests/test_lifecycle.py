"""Gateway start/stop: the order of parts, and a failed start undoing exactly what started.

Every part's start and stop is recorded in one list, so these tests see the real order the
``AsyncExitStack`` in gateway/runtime.py produces — not a count of calls.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from lucidgate.gateway.app import build_gateway
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
        gw = build_gateway(config)
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
    assert build_gateway(config, "tool").channels == {}
    assert build_gateway(config).channels == {}
