"""One descriptor per channel: the registry, the composition root, the prompt and the gate
all read it, so a channel added only through a descriptor gets everything the core decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

import lucidgate.channels.registry as registry
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.descriptor import REFUSAL_INTERVAL_S, ChannelDescriptor
from lucidgate.channels.gate import AccessGate
from lucidgate.channels.messages import OutboundMessage
from lucidgate.config.channel_schema import DeliverySection, GatedSection, StreamingSection, SwitchedSection
from lucidgate.config.schema import ChannelsConfig, Config
from lucidgate.gateway.app import build_gateway
from tests.channel_kit import deps_at


class PigeonConfig(SwitchedSection, GatedSection, DeliverySection, StreamingSection):
    """A made-up channel's section: nothing of its own beyond the shared parts."""


class PigeonChannels(ChannelsConfig):
    pigeon: PigeonConfig = Field(default_factory=PigeonConfig)


class PigeonRoot(Config):
    channels: PigeonChannels = Field(default_factory=PigeonChannels)


class PigeonChannel:
    name = "pigeon"

    def __init__(self, gate: AccessGate) -> None:
        self.gate = gate

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def send(self, msg: OutboundMessage) -> None: ...


def build(config: Config, deps: ChannelDeps) -> PigeonChannel:
    section = registry.CHANNELS["pigeon"].of(config.channels)
    assert isinstance(section, PigeonConfig)
    return PigeonChannel(AccessGate.for_section("pigeon", section, deps.bus, deps.pairing))


PIGEON = ChannelDescriptor("pigeon", PigeonConfig, "Replies are tied to a bird's leg: be brief.",
                           "tests.test_channel_descriptor:build", refusal_interval_s=86_400.0)


@pytest.fixture
def pigeon(monkeypatch: pytest.MonkeyPatch) -> ChannelDescriptor:
    monkeypatch.setitem(registry.CHANNELS, "pigeon", PIGEON)
    return PIGEON


def pigeon_config(make_config: Any, **section: Any) -> Config:
    base = make_config()
    document = base.model_dump(by_alias=True)
    document["channels"]["pigeon"] = {"enabled": True, **section}
    return PigeonRoot.model_validate(document)


def test_a_channel_added_by_one_descriptor_gets_its_deadline_hint_streaming_and_refusal_interval(
        make_config: Any, pigeon: ChannelDescriptor, workspace: Path) -> None:
    config = pigeon_config(make_config, deliveryDeadlineH=2, streaming=True)
    gateway = build_gateway(config, "embedded")
    parts = gateway.parts
    assert parts.bus.outbox is not None
    assert parts.bus.outbox.deadline_s("pigeon") == 2 * 3600.0  # the app's outbox
    assert parts.builder.channel_hints["pigeon"] == pigeon.hint  # the prompt
    assert "pigeon" in parts.agent.runner.streaming_channels  # the streaming set
    built = registry.build_channels(config, deps_at(MessageBus(), workspace),
                                    registry={"pigeon": pigeon})  # the registry
    channel = built["pigeon"]
    assert isinstance(channel, PigeonChannel)
    assert channel.gate.refusal_interval_s == 86_400.0  # the gate


def test_streaming_off_and_the_default_deadline_come_from_the_section(
        make_config: Any, pigeon: ChannelDescriptor) -> None:
    config = pigeon_config(make_config)
    assert "pigeon" not in registry.streaming_channels(config)
    assert registry.delivery_deadlines(config)["pigeon"] == 24 * 3600.0


def test_every_channel_has_a_hint_a_deadline_and_one_refusal_interval(make_config: Any) -> None:
    config = make_config(channels={"openai": {"deliveryDeadlineH": 1}})
    deadlines = registry.delivery_deadlines(config)
    hints = registry.channel_hints()
    for name in ("telegram", "slack", "discord", "webhook", "openai", "web", "cli"):
        assert hints[name], name
        assert deadlines[name] > 0, name
        assert registry.CHANNELS[name].refusal_interval_s == REFUSAL_INTERVAL_S
    assert deadlines["openai"] == 3600.0
    assert registry.streaming_channels(config) == {"cli", "web"}


def test_a_gate_for_a_channel_without_a_descriptor_is_refused(make_config: Any, workspace: Path) -> None:
    with pytest.raises(ValueError, match="no channel 'pigeon'"):
        AccessGate.for_section("pigeon", PigeonConfig(), MessageBus(), deps_at(MessageBus(), workspace).pairing)


def test_a_descriptor_needs_a_delivery_section() -> None:
    with pytest.raises(TypeError, match="DeliverySection"):
        ChannelDescriptor("odd", GatedSection, "hint")


def test_a_command_is_spelled_the_way_each_channel_takes_it() -> None:
    from lucidgate.channels.registry import command_text

    assert command_text("telegram", "approve 4f2a") == "/approve 4f2a"
    assert command_text("slack", "approve 4f2a") == "/lucid approve 4f2a"  # Slack keeps "/" for itself
    assert command_text("no-such-channel", "deny 1") == "/deny 1"
