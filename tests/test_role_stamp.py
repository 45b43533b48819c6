"""The role a gate stamps on a message is the role its turn runs in; unstamped means guest.

The session's origin is a ``SessionRef`` whose stored form is the JSON every earlier version
wrote, and the inbox journal keeps the stamped role across a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.channels.inbox import InboxJournal
from lucidgate.channels.messages import InboundMessage, ScheduledTask, SessionRef
from lucidgate.gateway.agent.roles import line_role
from lucidgate.gateway.app import build_gateway


def _msg(**kw: Any) -> InboundMessage:
    return InboundMessage(**{"channel": "cli", "chat_id": "1", "sender_id": "local", "text": "", **kw})


def test_the_turn_runs_in_the_stamped_role_never_the_configs(make_config: Callable[..., Any]) -> None:
    agent = build_gateway(make_config()).parts.agent
    # "local" is the cli channel's configured owner, but only a gate's stamp makes an owner.
    assert _msg().role == "guest" and agent.context_for(_msg()).role == "guest"
    assert agent.context_for(_msg(role="owner")).role == "owner"
    assert agent.context_for(_msg(sender_id="anyone", role="owner")).role == "owner"
    # A scheduled task runs as its creator, never above what the scheduler stamped now ...
    task = ScheduledTask("task:1", role="owner")
    assert agent.context_for(_msg(task=task, role="guest")).role == "guest"
    assert agent.context_for(_msg(task=task, role="owner")).role == "owner"
    assert agent.context_for(_msg(task=ScheduledTask("task:2"), role="owner")).role == "guest"
    # ... and the gateway's own jobs run exactly as given.
    internal = ScheduledTask("heartbeat", role="owner", internal=True)
    assert agent.context_for(_msg(task=internal)).role == "owner"


def test_the_inbox_keeps_the_stamp_and_an_unstamped_entry_replays_as_a_guest(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    journal = InboxJournal(path)
    journal.open()
    journal.append(_msg(text="owner's", message_id="a", role="owner"))
    journal.close()
    # An entry journalled before messages carried a role.
    path.write_text(path.read_text() + '{"id": "old", "msg": {"channel": "cli", "chat_id": "1", '
                    '"sender_id": "local", "text": "older", "message_id": "b"}}\n')
    replayed = {m.text: m.role for _, m in InboxJournal(path).open()}
    assert replayed == {"owner's": "owner", "older": "guest"}


def test_session_ref_reads_and_writes_the_stored_origin() -> None:
    ref = SessionRef("slack", "C1", "thread", "17.5")
    assert SessionRef.from_stored({"origin": ref.stored()}) == ref
    assert ref.stored() == {"channel": "slack", "chat_id": "C1", "chat_type": "thread", "thread_id": "17.5"}
    assert SessionRef.of(_msg(chat_type="group", thread_id="t")) == SessionRef("cli", "1", "group", "t")
    # Older files: a missing chat type is a private chat; an unknown one is never read as private.
    assert SessionRef.from_stored({"origin": {"channel": "cli", "chat_id": 7}}) == SessionRef("cli", "7")
    assert SessionRef.from_stored({"origin": {"channel": "x", "chat_id": "1", "chat_type": "odd"}}).chat_type == "group"
    for broken in ({}, {"origin": None}, {"origin": "cli:1"}, {"origin": {"chat_id": "1"}},
                   {"origin": {"channel": "cli"}}):
        assert SessionRef.from_stored(broken) is None


def test_a_stored_line_keeps_its_stamp_and_older_lines_ask_the_config(make_config: Callable[..., Any]) -> None:
    config = make_config(channels={"telegram": {"owners": ["42"]}})
    assert line_role(config, "telegram", {"sender_id": "42", "sender_role": "guest"}) == "guest"
    assert line_role(config, "telegram", {"sender_id": "7", "sender_role": "owner"}) == "owner"
    assert line_role(config, "telegram", {"sender_id": "42"}) == "owner"
    assert line_role(config, "telegram", {"sender_id": "7", "sender_role": "admin"}) == "guest"
    assert line_role(config, "slack", {"sender_id": "42"}) == "guest"


def test_who_pays_travels_with_the_message_the_inbox_and_a_resumed_turn(
        make_config: Callable[..., Any], tmp_path: Path) -> None:
    from lucidgate.gateway.agent.resume import resumed_message
    from lucidgate.gateway.agent.transcript_lines import user_line
    from lucidgate.memory.sessions import Session

    config = make_config()
    agent = build_gateway(config).parts.agent
    paid = _msg(channel="webhook", sender_id="alice", spender="credential:abc")
    assert agent.context_for(paid).payer == "credential:abc"
    assert agent.context_for(_msg(channel="telegram", sender_id="42")).payer == "telegram:42"
    journal = InboxJournal(tmp_path / "inbox.jsonl")
    journal.open()
    journal.append(paid)
    journal.close()
    assert [m.spender for _, m in InboxJournal(tmp_path / "inbox.jsonl").open()] == ["credential:abc"]
    session = Session(key="webhook:1", path=tmp_path / "s.jsonl")
    session.messages.append(user_line(paid, None))
    resumed = resumed_message(config, session, SessionRef("webhook", "1"))
    assert resumed.spender == "credential:abc" and agent.context_for(resumed).payer == "credential:abc"


def test_a_guests_task_is_paid_by_whoever_paid_for_the_turn_that_set_it(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from lucidgate.scheduler.reminders import ReminderStore
    from lucidgate.scheduler.tasks import task_message

    store = ReminderStore(tmp_path / "reminders.sqlite")
    task = store.add(session_key="webhook:c1", channel="webhook", chat_id="c1", thread_id=None, kind="every",
                     spec="3600", text="say hi", created_at=datetime.now(UTC), purpose="task",
                     creator_id="anyone-the-caller-named", creator_role="guest",
                     creator_spender="credential:channels.webhook.token")
    (stored,) = ReminderStore(tmp_path / "reminders.sqlite").active()
    assert stored.creator_spender == "credential:channels.webhook.token"
    msg = task_message(stored, tz=UTC, token_budget=1000, creator_now="guest")
    assert msg.spender == "credential:channels.webhook.token" and task.id == stored.id
