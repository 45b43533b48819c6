"""``/new`` leaves a dated note of the conversation it closes: ``memory/<date>-<slug>.md``,
found by recall like any note, owner private chats only, and off with
``memory.sessionNotes: false``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path

from lucidgate.memory.search.hits import Scope
from lucidgate.memory.session_note import slug
from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_agent_loop import OWNER, running

KEYWORD_ONLY = {"memory": {"search": {"embedding": {"model": "none"}}}}


def notes(workspace: Path) -> list[Path]:
    return sorted(p for p in (workspace / "memory").glob("*-*-*-*.md"))


async def test_new_writes_a_dated_note_that_recall_finds(fake_llm: FakeLLMServer, make_config: Callable,
                                                         workspace: Path) -> None:
    fake_llm.queue(Reply("Noted."), Reply("- The user is planning a kayak trip to Lake Bled in May"))
    async with running(make_config(agents={"defaults": {"timezone": "UTC", **KEYWORD_ONLY}})) as (gw, ch):
        await ch.say("Help me plan the kayak trip to Lake Bled", **OWNER)
        await ch.wait_replies(1)
        await ch.say("/new", **OWNER)
        [_, reply] = await ch.wait_replies(2)
        [note] = notes(workspace)
        assert gw.parts.recall is not None
        gw.parts.recall.mark_dirty()  # what the file watcher does on a new note, without waiting for it
        hits = await gw.parts.recall.search("kayak Bled", scope=Scope.everything(), sources=["notes"])
    assert note.name == f"{date.today().isoformat()}-help-plan-kayak-trip-lake.md"
    assert f"A note of it is in memory/{note.name}." in reply.text
    text = note.read_text()
    assert text.startswith(f"# {date.today().isoformat()} ") and "Help me plan the kayak trip" in text.splitlines()[0]
    assert "Conversation cli:1, closed with /new (2 message(s))." in text
    assert "- The user is planning a kayak trip to Lake Bled in May" in text
    assert [h.path for h in hits][:1] == [f"memory/{note.name}"]


async def test_no_note_for_guests_or_when_turned_off(fake_llm: FakeLLMServer, make_config: Callable,
                                                     workspace: Path) -> None:
    fake_llm.queue(Reply("hi"), Reply("- a guest said hello"), Reply("ok"), Reply("- owner chat"))
    async with running(make_config()) as (gw, ch):
        await ch.say("hello there", sender_id="stranger", chat_id="9")
        await ch.wait_replies(1)
        await ch.say("/new", sender_id="stranger", chat_id="9")
        [_, guest] = await ch.wait_replies(2)
    assert "went to memory" in guest.text and notes(workspace) == []
    async with running(make_config(agents={"defaults": {"memory": {"sessionNotes": False}}})) as (gw, ch):
        await ch.say("remember the boat", chat_id="2", **OWNER)
        await ch.wait_replies(1)
        await ch.say("/new", chat_id="2", **OWNER)
        [_, owner] = await ch.wait_replies(2)
    assert "went to memory" in owner.text and "A note of it" not in owner.text
    assert notes(workspace) == []


def test_slugs_are_short_and_safe() -> None:
    assert slug("Hi! Can you fix the CI / deploy for api-v2?") == "fix-ci-deploy-for-api"
    assert slug("你好") == "conversation"
    assert slug("../../etc/passwd") == "etc-passwd"
