"""The access gate: one table of who is allowed where, and what strangers are told (on the bus)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.gate import AccessGate, AccessRequest, Decision, Roster, refusal_text
from lucidgate.channels.messages import OutboundMessage, OutboundText, Target
from lucidgate.channels.pairing import MAX_PENDING_PER_CHANNEL, PairingStore, default_path
from lucidgate.config.schema import OPENAI_OWNER_ID

REFUSAL = "Sorry, I only talk to people my owner has allowed."
REPLY = Target("telegram", "666", None, "9001")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def sent() -> AsyncIterator[tuple[MessageBus, list[OutboundMessage]]]:
    """A real bus with a recording subscriber standing in for the channel's ``send``."""
    bus = MessageBus()
    out: list[OutboundMessage] = []

    async def record(msg: OutboundMessage) -> None:
        out.append(msg)

    bus.subscribe("telegram", record)
    yield bus, out
    await bus.stop()


MakeGate = Callable[..., AccessGate]


@pytest.fixture
def make_gate(sent: tuple[MessageBus, list[OutboundMessage]], tmp_path: Path) -> MakeGate:
    bus, _ = sent

    def make(*, allow_from: tuple[str, ...] = ("123", "@Carol"), owners: tuple[str, ...] = ("42",),
             refusal: str | None = REFUSAL, pairing: bool = False, clock: Any = None) -> AccessGate:
        store = PairingStore(default_path(tmp_path))
        return AccessGate("telegram", bus, Roster(allow_from, owners), store, refusal=refusal,
                          pairing=pairing, refusal_interval_s=600.0, **({"clock": clock} if clock else {}))

    return make


def knock(sender: str, username: str | None = None, chat_type: Any = "private") -> AccessRequest:
    return AccessRequest("telegram", "666", sender, username, chat_type)


@pytest.mark.parametrize(("allow_from", "pairing", "request_", "expected"), [
    # owners are always allowed, even when allowFrom is empty or does not list them
    (("123",), False, knock("42"), Decision("allowed", "owner")),
    ((), False, knock("42"), Decision("allowed", "owner")),
    # ids match exactly, as strings
    (("123",), False, knock("123"), Decision("allowed", "guest")),
    (("123",), False, knock("1234"), Decision("refused", "guest")),
    (("123",), False, knock("0123"), Decision("refused", "guest")),
    ((" 123 ",), False, knock("123"), Decision("allowed", "guest")),
    (("123,456",), False, knock("456"), Decision("refused", "guest")),  # never split on a separator
    # @username entries match the username case-insensitively, never the id
    (("@Carol",), False, knock("555", "carol"), Decision("allowed", "guest")),
    (("@carol",), False, knock("555", "@CAROL"), Decision("allowed", "guest")),
    (("@carol",), False, knock("555", "caroline"), Decision("refused", "guest")),
    (("@carol",), False, knock("carol"), Decision("refused", "guest")),
    (("carol",), False, knock("555", "carol"), Decision("refused", "guest")),
    # an empty allowFrom denies everyone but the owners
    ((), False, knock("123", "carol"), Decision("refused", "guest")),
    # a stranger may pair in a private chat when pairing is on, never in a group
    ((), True, knock("666"), Decision("pairing", "guest")),
    ((), True, knock("666", chat_type="group"), Decision("refused", "guest")),
])
async def test_the_decision_table(make_gate: MakeGate, sent: tuple[MessageBus, list[OutboundMessage]],
                                  allow_from: tuple[str, ...], pairing: bool, request_: AccessRequest,
                                  expected: Decision) -> None:
    bus, out = sent
    gate = make_gate(allow_from=allow_from, pairing=pairing)
    assert await gate.check(request_) == expected
    await bus.flush_outbound()
    assert out == []  # deciding sends nothing
    assert gate.store.pending() == []  # and issues nothing


async def test_a_stranger_is_refused_once_on_the_bus_then_rate_limited(
        make_gate: MakeGate, sent: tuple[MessageBus, list[OutboundMessage]]) -> None:
    bus, out = sent
    clock = Clock()
    gate = make_gate(clock=clock)
    assert not (await gate.admit(knock("666"), REPLY)).allowed
    assert not (await gate.admit(knock("666"), REPLY)).allowed
    await bus.flush_outbound()
    assert out == [OutboundText(REPLY, REFUSAL, plain=True)]
    other = Target("telegram", "777", None, "1")
    await gate.admit(AccessRequest("telegram", "777", "777"), other)  # per sender, not per channel
    clock.now += 601
    await gate.admit(knock("666"), REPLY)  # the interval has passed
    await bus.flush_outbound()
    assert [(m.target.chat_id, m.text) for m in out] == [("666", REFUSAL), ("777", REFUSAL), ("666", REFUSAL)]


async def test_allowed_senders_pass_without_a_reply(
        make_gate: MakeGate, sent: tuple[MessageBus, list[OutboundMessage]]) -> None:
    bus, out = sent
    gate = make_gate()
    assert await gate.admit(knock("42"), REPLY) == Decision("allowed", "owner")
    assert await gate.admit(knock("555", "CAROL"), REPLY) == Decision("allowed", "guest")
    await bus.flush_outbound()
    assert out == []


async def test_refusal_none_is_silence_and_issues_no_code(
        make_gate: MakeGate, sent: tuple[MessageBus, list[OutboundMessage]]) -> None:
    bus, out = sent
    gate = make_gate(refusal=None, pairing=True)
    assert (await gate.admit(knock("666"), REPLY)).outcome == "pairing"
    await bus.flush_outbound()
    assert out == [] and gate.store.pending() == []


async def test_pairing_flow_code_on_the_bus_then_approval_lets_the_sender_in(
        make_gate: MakeGate, sent: tuple[MessageBus, list[OutboundMessage]]) -> None:
    bus, out = sent
    gate = make_gate(allow_from=(), pairing=True)
    assert (await gate.admit(knock("666"), REPLY)).outcome == "pairing"
    await bus.flush_outbound()
    (pending,) = gate.store.pending("telegram")
    code = pending["code"]
    assert out == [OutboundText(REPLY, refusal_text(REFUSAL, code), plain=True)]
    assert out[0].text.startswith(REFUSAL) and f"lucid pairing approve {code}" in out[0].text  # type: ignore[union-attr]
    # the owner approves it (the CLI's store is another instance on the same file)
    cli_store = PairingStore(gate.store.path)
    assert cli_store.approve(code) == ("telegram", "666")
    assert cli_store.approve(code) is None  # single use
    assert await gate.admit(knock("666"), REPLY) == Decision("allowed", "guest")
    assert not gate.is_owner("666") and gate.role("666") == "guest" and gate.role("42") == "owner"
    await bus.flush_outbound()
    assert len(out) == 1


async def test_approvals_are_per_channel_and_count_only_while_pairing_is_on(
        make_gate: MakeGate, tmp_path: Path) -> None:
    store = PairingStore(default_path(tmp_path))
    store.issue("slack", "666")
    assert store.approve(store.pending("slack")[0]["code"]) == ("slack", "666")
    gate = make_gate(allow_from=(), pairing=True)
    assert await gate.check(knock("666")) == Decision("pairing", "guest")  # approved on Slack, not here
    store.issue("telegram", "666")
    assert store.approve(store.pending("telegram")[0]["code"]) == ("telegram", "666")
    assert await gate.check(knock("666")) == Decision("allowed", "guest")
    assert await gate.check(knock("666", chat_type="group")) == Decision("allowed", "guest")
    # switching pairing off leaves only owners and allowFrom
    assert await make_gate(allow_from=(), pairing=False).check(knock("666")) == Decision("refused", "guest")


async def test_when_no_code_can_be_issued_the_plain_refusal_still_goes_out(
        make_gate: MakeGate, sent: tuple[MessageBus, list[OutboundMessage]]) -> None:
    bus, out = sent
    gate = make_gate(allow_from=(), pairing=True)
    for i in range(MAX_PENDING_PER_CHANNEL):
        await gate.admit(AccessRequest("telegram", f"{i}", f"s{i}"), Target("telegram", f"{i}"))
    await gate.admit(knock("666"), REPLY)
    await bus.flush_outbound()
    assert len(out) == MAX_PENDING_PER_CHANNEL + 1
    assert out[-1] == OutboundText(REPLY, REFUSAL, plain=True)


def test_each_channels_owners_are_read_from_its_typed_section(make_config: Callable[..., Any]) -> None:
    config = make_config(channels={"telegram": {"owners": ["42", " "]}, "webhook": {"owners": ["ops"]},
                                   "openai": {"owner": True}})
    owners = config.channels.owners_of
    assert owners("telegram") == {"42"}
    assert owners("webhook") == {"ops"}
    assert owners("cli") == {"local"}  # the terminal user, by default
    assert owners("web") == {"console"}
    assert owners("openai") == {OPENAI_OWNER_ID}
    assert owners("slack") == frozenset()  # owners are per channel
    assert owners("no-such-channel") == frozenset()
    roster = Roster.of(config.channels.telegram)
    assert roster.role("42") == "owner" and roster.role("43") == "guest"
