"""What the root gives a channel (``channels/deps.py`` ``ChannelDeps``): everything at
construction — nothing is bound to a channel afterwards — and one pairing store shared by
every access gate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.channels import web as web_channel
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.gate import AccessGate, AccessRequest
from lucidgate.channels.messages import OutboundMessage, OutboundText, Target
from lucidgate.channels.pairing import PairingStore, default_path
from lucidgate.config.schema import Config
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.stores import WorkspaceParts
from lucidgate.memory.sessions import SessionStore
from lucidgate.memory.sessions_view import SessionsOnDisk

STRANGERS = 5  # per channel: as many codes as a channel may have outstanding


def daemon_config(make_config: Callable[..., Config]) -> Config:
    """Two gated platforms with pairing on, the webhook and the console's web chat."""
    gated = {"enabled": True, "owners": ["1"], "pairing": True}
    return make_config(channels={
        "telegram": {**gated, "token": "123456:abc", "apiBase": "http://127.0.0.1:9"},
        "slack": {**gated, "owners": ["U1"], "botToken": "xoxb-1", "appToken": "xapp-1",
                  "apiBase": "http://127.0.0.1:9/api/"},
        "webhook": {"token": "t" * 32},
        "web": {"enabled": True},
    }, console={"token": "c" * 32})


def test_the_daemon_builds_each_channel_complete_around_one_pairing_store(
        make_config: Callable[..., Config]) -> None:
    config = daemon_config(make_config)
    gateway = build_gateway(config, "daemon")
    deps = gateway.channel_deps
    telegram, slack, webhook = (gateway.channel(n) for n in ("telegram", "slack", "webhook"))
    # Every gate reads the one store the root built at the workspace's pairing file, the file
    # `lucid pairing approve` writes.
    assert telegram.gate.store is deps.pairing and slack.gate.store is deps.pairing  # type: ignore[union-attr]
    assert deps.pairing.path == WorkspaceParts(config).pairing.path
    # The transcript readers had their view from the start: nothing to bind later.
    assert isinstance(deps.sessions, SessionsOnDisk)
    assert webhook.sessions_view is deps.sessions  # type: ignore[union-attr]
    assert not any(hasattr(channel, "bind_sessions") for channel in gateway.channels.values())
    assert {spec.name for spec in deps.commands} >= {"help", "stop", "status"}  # the menus' source


async def test_the_web_chat_its_factory_builds_shows_the_turns_tool_calls(
        make_config: Callable[..., Config], workspace: Path) -> None:
    sessions = SessionStore(workspace / "sessions")
    session = await sessions.get("web:tab-1")
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes.md"}'}}
    await sessions.append(session, {"role": "user", "content": "what do my notes say?"},
                          {"role": "assistant", "content": None, "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "buy tea"})
    deps = ChannelDeps(MessageBus(), workspace, PairingStore(default_path(workspace)),
                       sessions=SessionsOnDisk(sessions))
    web = web_channel.build(make_config(), deps)
    sub = await web.subscribe("tab-1", 0)
    await web.send(OutboundText(Target("web", "tab-1"), "Buy tea.", in_reply_to="m1"))
    live = await asyncio.wait_for(sub.next(), 10)
    assert live.event is not None and live.event.text == "Buy tea."
    assert live.event.tools == [{"name": "read_file", "arguments": '{"path": "notes.md"}', "result": "buy tea"}]


async def test_two_channels_pairing_at_once_through_the_shared_store_lose_no_code_or_approval(
        make_config: Callable[..., Config]) -> None:
    """Gates on two channels issue codes at the same moment (each in a worker thread) into the
    one store; every code is kept, each approval sticks, and the file a separate process (the
    CLI) reads holds all of them."""
    config = daemon_config(make_config)
    gateway = build_gateway(config, "daemon")
    gates = [gateway.channel(n).gate for n in ("telegram", "slack")]  # type: ignore[union-attr]
    bus = gateway.channel_deps.bus
    sent: list[OutboundMessage] = []

    async def record(msg: OutboundMessage) -> None:
        sent.append(msg)

    for name in ("telegram", "slack"):
        bus.subscribe(name, record)
    knocks = [(gate, f"s{i}") for gate in gates for i in range(STRANGERS)]
    decisions = await asyncio.gather(*(admit(gate, sender) for gate, sender in knocks))
    assert {d.outcome for d in decisions} == {"pairing"}
    await bus.flush_outbound()
    assert len(sent) == len(knocks)  # every stranger got a refusal with a code
    cli = PairingStore(gateway.channel_deps.pairing.path)  # `lucid pairing` opens the file anew
    pending = cli.pending()
    assert sorted((e["channel"], e["sender_id"]) for e in pending) == sorted(
        (gate.channel, sender) for gate, sender in knocks)
    assert len({e["code"] for e in pending}) == len(knocks)
    approvals = await asyncio.gather(*(asyncio.to_thread(gateway.channel_deps.pairing.approve, e["code"])
                                       for e in pending))
    assert sorted(approvals) == sorted((gate.channel, sender) for gate, sender in knocks)  # type: ignore[type-var]
    for gate, sender in knocks:
        assert (await admit(gate, sender)).allowed
        assert sender in cli.approved(gate.channel)
    await bus.stop()


async def admit(gate: AccessGate, sender: str) -> Any:
    return await gate.admit(AccessRequest(gate.channel, sender, sender), Target(gate.channel, sender))
