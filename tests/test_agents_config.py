"""Several agents, the pure parts (issue 41): ``agents.list`` and ``bindings`` as the config
reads them, ``Config.for_agent``, the ``Router``'s choice of agent and role, the session keys
it leads to, and the route surviving a restart in the inbox journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, ScheduledTask
from lucidgate.channels.routing import Router
from lucidgate.config.errors import ConfigError
from lucidgate.config.loader import load_config
from lucidgate.config.schema import Config


def two_agents(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "agents": {"defaults": {"model": "openai/base", "memory": {"maxMemoryChars": 5000}},
                   "list": [{"id": "home", "workspace": str(tmp_path / "home")},
                            {"id": "work", "workspace": str(tmp_path / "work"), "model": "openai/work-model",
                             "memory": {"autoRecall": False}, "owners": {"telegram": ["7"]}}]},
        "channels": {"telegram": {"owners": ["1"]}},
    }
    document.update(extra)
    return document


def load(tmp_path: Path, document: dict[str, Any]) -> Config:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document))
    return load_config(path, environ={})


# ----------------------------------------------------------------------------- the schema


def test_without_a_list_there_is_one_default_agent_and_its_config_is_the_config_itself(tmp_path: Path) -> None:
    config = load(tmp_path, {"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}})
    assert config.agent_ids() == ["default"] and config.default_agent_id == "default"
    assert config.for_agent("default") is config
    assert config.workspace == tmp_path / "ws" and config.agent is config.agents.defaults


def test_an_agent_is_the_defaults_deep_merged_with_its_entry_and_its_own_owners(tmp_path: Path) -> None:
    config = load(tmp_path, two_agents(tmp_path))
    assert config.agent_ids() == ["home", "work"] and config.default_agent_id == "home"
    work = config.for_agent("work")
    assert work.workspace == tmp_path / "work" and work.agent.model == "openai/work-model"
    # Deep merge: the override of one memory key keeps the defaults' other memory keys.
    assert work.agent.memory.auto_recall is False and work.agent.memory.max_memory_chars == 5000
    assert work.channels.owners_of("telegram") == {"7"}  # only its own: the channel's owner is not
    assert work.channels.owners_of("cli") == frozenset() and work.channels.owners_of("web") == frozenset()
    home = config.for_agent("home")  # the default keeps the channels' owners
    assert home.channels.owners_of("telegram") == {"1"} and home.channels.owners_of("cli") == {"local"}
    # The root config's own agent is the default one, so `lucid` commands act on it.
    assert config.workspace == tmp_path / "home" and config.agent.model == "openai/base"
    assert work.agent_ids() == ["default"] and work.bindings == []  # an agent's config knows no others


def test_the_entry_marked_default_is_the_default_agent(tmp_path: Path) -> None:
    document = two_agents(tmp_path)
    document["agents"]["list"][1]["default"] = True
    config = load(tmp_path, document)
    assert config.default_agent_id == "work" and config.agent_ids() == ["work", "home"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d, t: d["agents"]["list"].append({"id": "home", "workspace": str(t / "x")}), "used twice"),
    (lambda d, t: d["agents"]["list"].append({"id": "sub", "workspace": str(t / "home" / "sub")}), "nested"),
    (lambda d, t: d["agents"]["list"].append({"id": "same", "workspace": str(t / "work")}), "same as"),
    (lambda d, t: d["agents"]["list"][1].update(modle="x"), "'modle' is not a setting of agents.defaults"),
    (lambda d, t: d["agents"]["list"][1].update(maxToolIterations=0), "agents.list[1] (work)"),
    (lambda d, t: d["agents"]["list"][0].update(id="Home"), "agents.list.0.id"),
    (lambda d, t: [e.update(default=True) for e in d["agents"]["list"]], "only one agent can be the default"),
    (lambda d, t: d["agents"]["list"][0].update(shareWith=["nobody"]), "shareWith names 'nobody'"),
    (lambda d, t: d.update(bindings=[{"agent": "play", "match": {"chat": "1"}}]), "bindings[0]: no agent 'play'"),
    (lambda d, t: d.update(bindings=[{"agent": "work", "match": {}}]), "at least one of channel"),
    (lambda d, t: d.update(bindings=[{"agent": "work", "match": {"room": "1"}}]), "bindings.0.match.room"),
])
def test_a_bad_agents_list_or_binding_is_refused_naming_the_entry(tmp_path: Path, change: Any, message: str) -> None:
    document = two_agents(tmp_path)
    change(document, tmp_path)
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, document)
    assert message in str(caught.value)


def test_share_with_names_another_agent_and_is_accepted(tmp_path: Path) -> None:
    document = two_agents(tmp_path)
    document["agents"]["list"][1]["shareWith"] = ["home"]
    assert load(tmp_path, document).agents.entries[1].share_with == ["home"]


# ----------------------------------------------------------------------------- the router


def msg(channel: str = "telegram", chat: str = "100", sender: str = "1", role: str = "guest",
        **kw: Any) -> InboundMessage:
    return InboundMessage(channel=channel, chat_id=chat, sender_id=sender, text="hi", role=role, **kw)  # type: ignore[arg-type]


def routed_config(tmp_path: Path) -> Config:
    document = two_agents(tmp_path)
    document["agents"]["list"].append({"id": "play", "workspace": str(tmp_path / "play")})
    document["bindings"] = [  # written least specific first: the order in the file must not matter
        {"agent": "play", "match": {"channel": "webhook"}},
        {"agent": "work", "match": {"account": "bot2"}},
        {"agent": "work", "match": {"channel": "telegram", "sender": "7"}},
        {"agent": "play", "match": {"channel": "telegram", "chat": "500"}},
        {"agent": "home", "match": {"channel": "telegram", "chat": "500", "sender": "7"}},
    ]
    return load(tmp_path, document)


def test_the_most_specific_binding_wins_and_an_unbound_message_goes_to_the_default(tmp_path: Path) -> None:
    router = Router(routed_config(tmp_path))
    assert router.agent_for(msg(chat="500", sender="7")) == "home"  # sender + chat
    assert router.agent_for(msg(chat="500", sender="8")) == "play"  # chat
    assert router.agent_for(msg(chat="9", sender="7")) == "work"  # sender
    assert router.agent_for(msg(channel="webhook", account="bot2")) == "work"  # account beats channel
    assert router.agent_for(msg(channel="webhook")) == "play"  # channel
    assert router.agent_for(msg(channel="slack", sender="7")) == "home"  # unbound: the default
    routed = router.route(msg(chat="9", sender="7"))
    assert routed.agent == "work" and routed.session_key == "work:telegram:9"
    home = router.route(msg(chat="500", sender="7"))
    assert home.agent == "" and home.session_key == "telegram:500"  # the default's keys stay as they were


def test_roles_are_per_agent(tmp_path: Path) -> None:
    router = Router(routed_config(tmp_path))
    # The channel's owner (gate-stamped) is a guest of "work", which does not list them...
    assert router.route(msg(chat="9", sender="1", role="owner", account="bot2")).role == "guest"
    # ...and the sender work lists is its owner there, though the channel made them a guest.
    assert router.route(msg(chat="9", sender="7", role="guest")).role == "owner"
    # The default agent keeps the channel's roles.
    assert router.route(msg(chat="1", sender="1", role="owner")).role == "owner"
    assert router.route(msg(chat="2", sender="2", role="guest")).role == "guest"


def test_a_listed_sender_on_a_channel_whose_caller_names_the_sender_needs_the_channels_owner_stamp(
        tmp_path: Path) -> None:
    document = two_agents(tmp_path, bindings=[{"agent": "work", "match": {"channel": "webhook"}}])
    document["agents"]["list"][1]["owners"] = {"webhook": ["boss"]}
    router = Router(load(tmp_path, document))
    assert router.route(msg(channel="webhook", sender="boss", role="guest")).role == "guest"  # named, not proven
    assert router.route(msg(channel="webhook", sender="boss", role="owner")).role == "owner"  # owner token
    assert router.route(msg(channel="webhook", sender="other", role="owner")).role == "guest"  # not work's


def test_a_message_with_its_agent_or_a_gateway_turn_is_left_as_it_is(tmp_path: Path) -> None:
    router = Router(routed_config(tmp_path))
    given = msg(chat="9", sender="7", agent="play")
    assert router.route(given) is given
    task = msg(chat="9", sender="7", task=ScheduledTask(job="task:1"))
    assert router.route(task) is task  # the default agent's own task stays with it


def test_without_several_agents_nothing_is_routed(tmp_path: Path) -> None:
    router = Router(load(tmp_path, {}))
    given = msg(role="owner")
    assert not router.several and router.route(given) is given


# ----------------------------------------------------------------------------- the journal


async def test_a_replayed_message_keeps_its_route_and_goes_only_to_its_agent(tmp_path: Path) -> None:
    config = routed_config(tmp_path)
    journal = tmp_path / "inbox.jsonl"
    bus = MessageBus(inbox=InboxJournal(journal), router=Router(config))
    await bus.start()
    assert await bus.publish_inbound(msg(chat="9", sender="7", message_id="m1"))
    assert await bus.publish_inbound(msg(chat="2", sender="2", message_id="m2"))
    await bus.stop()  # nothing acked: a crash, as far as the journal knows
    # After the restart the bindings changed; the journalled route still holds.
    restarted = MessageBus(inbox=InboxJournal(journal), router=Router(load(tmp_path, two_agents(tmp_path))))
    await restarted.start()
    work = await restarted.consume_inbound("work")
    home = await restarted.consume_inbound("")
    assert (work.msg.message_id, work.replayed, work.msg.session_key) == ("m1", True, "work:telegram:9")
    assert work.msg.role == "owner"  # the role it was routed with
    assert (home.msg.message_id, home.msg.agent) == ("m2", "")
    assert restarted.inbound_depth == 0
    await restarted.stop()


def test_a_journal_written_before_several_agents_reads_as_before(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    old = {"channel": "telegram", "chat_id": "5", "sender_id": "5", "text": "hi", "chat_type": "private",
           "thread_id": None, "media": [], "message_id": "9", "sender_name": None, "silent": False,
           "task": None, "role": "owner", "spender": None}
    path.write_text(json.dumps({"id": "abc", "msg": old}) + "\n")
    journal = InboxJournal(path)
    ((receipt, replayed),) = journal.open()
    assert receipt == "abc" and replayed.agent == "" and replayed.session_key == "telegram:5"
    journal.append(msg(message_id="new"))  # the default agent's lines are written as before
    journal.close()
    last = json.loads(path.read_text().splitlines()[-1])["msg"]
    assert set(last) == set(old)


# ----------------------------------------------------------------------------- an agent's own turns


async def test_a_gateway_turn_of_another_agent_reaches_only_that_agent(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from lucidgate.scheduler.reminders import Reminder
    from lucidgate.scheduler.tasks import task_message

    bus = MessageBus(router=Router(routed_config(tmp_path)))
    task = Reminder(id=3, session_key="work:telegram:9", channel="telegram", chat_id="9", thread_id=None,
                    chat_type="private", text="check the build", kind="every", spec="3600",
                    created_at=datetime(2026, 11, 1, tzinfo=timezone.utc), purpose="task",
                    creator_id="7", creator_role="owner")
    await bus.publish_inbound(task_message(task, tz=timezone.utc, token_budget=5000, creator_now="owner",
                                           agent="work"))
    await bus.publish_inbound(msg(chat="9", sender="2", task=ScheduledTask(job="heartbeat", internal=True)))
    work = await bus.consume_inbound("work")
    assert work.msg.session_key == "work:telegram:9" and work.msg.task is not None
    home = await bus.consume_inbound("")
    assert home.msg.task is not None and home.msg.task.job == "heartbeat" and bus.inbound_depth == 0


def test_approvals_ask_in_the_agents_own_owner_chats(tmp_path: Path) -> None:
    from lucidgate.gateway.approvals.gate import owner_private_chats
    from lucidgate.gateway.tools.turn import TurnContext

    keys = {"telegram:1", "slack:5", "work:telegram:7", "work:slack:8:thread"}
    ctx = TurnContext(session_key="work:telegram:9", channel="telegram", chat_id="9", sender_id="x",
                      role="guest", chat_type="group", workspace=tmp_path)
    work = owner_private_chats(keys, lambda channel: True, agent="work")(ctx)
    assert [(t.channel, t.chat_id) for t in work] == [("telegram", "7")]
    home = owner_private_chats(keys, lambda channel: True)(ctx)
    assert [(t.channel, t.chat_id) for t in home] == [("telegram", "1"), ("slack", "5")]
