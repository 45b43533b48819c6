"""Forget means forget: one ``/forget`` reaches every place the assistant reads, and the
fact never comes back — not when the owner says it again, not through ``/new``, the
consolidator, the memory flush or Dream, even with a model that echoes it back (issue 39).

The fake LLM answers by what it is asked and always mentions the cat; each request it
received after the forget is checked for the name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from lucidgate.memory.dream_prompts import PHASE1_SYSTEM, PHASE2_SYSTEM
from lucidgate.memory.search.hits import Scope
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_agent_loop import OWNER, running
from tests.test_memory_flush import LONG, is_flush, is_summary

FILLER = "".join(f"- project note {i}: the build uses tool number {i}\n" for i in range(12))


def system_of(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    return first["content"] if first["role"] == "system" and isinstance(first["content"], str) else ""


def echoing(note: str) -> Callable[[dict[str, Any]], Any]:
    """Every kind of call answers with the cat's name in it."""
    def answer(request: dict[str, Any]) -> Any:
        last = request["messages"][-1]
        if is_summary(request):
            return Reply("- The user's cat is named Luna.\n- The user likes long meetings.")
        if system_of(request).startswith(PHASE1_SYSTEM[:60]):
            return Reply("[USER] The user's cat is named Luna\n[MEMORY] The user bought a lamp")
        if system_of(request).startswith(PHASE2_SYSTEM[:60]):
            if last["role"] == "tool":
                return Reply("done")
            return ToolCalls([("edit_file", {"path": "memory/MEMORY.md", "old_text": "- project note 0:",
                                             "new_text": "- Cat: LUNA\n- bought a lamp\n- project note 0:"})])
        if is_flush(request):
            if last["role"] == "tool":
                return Reply("NO_REPLY")
            return ToolCalls([("write_file", {"path": note,
                                              "content": "- my cat is\n  named Luna\n- meeting at 10\n"})])
        return Reply("Noted: your cat is named Luna.")
    return answer


async def test_one_forget_reaches_everything_and_nothing_brings_it_back(
        fake_llm: FakeLLMServer, make_config: Callable[..., Any], workspace: Path) -> None:
    today = date.today().isoformat()
    note = f"memory/{today}.md"
    fake_llm.default = echoing(note)
    config = make_config(agents={"defaults": {
        "timezone": "UTC", "memory": {"flushTranscriptBytes": 2048,
                                      "search": {"embedding": {"model": "none"}}}}})
    async with running(config) as (gw, ch):
        ws = workspace
        (ws / "USER.md").write_text("# User\n- lives in Lisbon\n- my cat is named Luna\n")
        (ws / "memory" / "MEMORY.md").write_text("# Memory\n" + FILLER)
        (ws / "memory" / f"{today}.md").write_text("- vet appointment for\n  LUNA on Friday\n- buy milk\n")
        await gw.parts.store.append_history("- The user's cat is Luna\n- The user lives in Lisbon",
                                            session_key="cli:1")
        gw.parts.owner_sessions.add("cli:1")
        # An open conversation in another chat holds the fact in its working set.
        await ch.say("please remember my cat is named Luna", chat_id="2", **OWNER)
        await ch.wait_replies(1)
        assert gw.parts.recall is not None
        assert await gw.parts.recall.search("Luna", scope=Scope.everything())  # findable before
        await ch.say("/forget luna", **OWNER)
        [_, reply] = await ch.wait_replies(2)
        forgot_at = len(fake_llm.requests)
        assert reply.text.startswith("Forgot:\n"), reply.text
        for place in ("USER.md: 1 line(s)", f"memory/{today}.md: 1 line(s)", "history: 1 line(s) in 1 entr",
                      "conversations: 1 session(s)", "recall index:", "history of changes (git) still holds"):
            assert place in reply.text, (place, reply.text)

        # The other chat's next turn: its working set shows [forgotten], not the name.
        await ch.say("what is my cat called?", chat_id="2", **OWNER)
        await ch.wait_replies(3)
        # The owner says it again, then a long message: the flush writes the note (echoing),
        # consolidation summarises (echoing); then /new and Dream (echoing) over the same chat.
        await ch.say("my cat is named Luna", **OWNER)
        await ch.wait_replies(4)
        await ch.say(LONG, **OWNER)
        await ch.wait_replies(5)
        await gw.parts.agent.idle()
        await gw.parts.consolidator.drain()
        await ch.say("/new", **OWNER)
        await ch.wait_replies(6)
        await gw.parts.store.append_history("- The user bought a lamp", session_key="cli:1")
        await ch.say("/dream", **OWNER)
        replies = await ch.wait_replies(7)
        hits = await gw.parts.recall.search("Luna", scope=Scope.everything())
        flush_count = gw.parts.agent.flush.count if gw.parts.agent.flush else 0

    kinds = [("summary" if is_summary(r) else "flush" if is_flush(r)
              else "dream1" if system_of(r).startswith(PHASE1_SYSTEM[:60])
              else "dream2" if system_of(r).startswith(PHASE2_SYSTEM[:60]) else "turn")
             for r in fake_llm.requests[forgot_at:]]
    assert {"summary", "flush", "dream1", "dream2", "turn"} <= set(kinds), kinds
    assert flush_count >= 1
    for kind, request in zip(kinds, fake_llm.requests[forgot_at:], strict=True):
        # Dream's inputs; its loop's later requests repeat the model's own edit back to it
        shown = request["messages"][:2] if kind == "dream2" else request["messages"]
        assert "luna" not in json.dumps(shown).lower(), kind  # no prompt holds it
    assert "Dream" in replies[-1].text or "change" in replies[-1].text.lower()
    assert hits == []  # no recall hit
    remembered = [p for p in ws.rglob("*") if p.is_file() and ".git" not in p.parts
                  and p.parts[-2] != "sessions" and not p.name.startswith("inbox") and "luna" in p.read_bytes().decode("utf-8", "replace").lower()
                  and p.suffix in (".md", ".jsonl")]
    assert remembered == []  # no memory file, note, history or archive holds it
    assert "bought a lamp" in (ws / "memory" / "MEMORY.md").read_text()  # Dream's other edit landed
    assert "meeting at 10" in (ws / note).read_text()  # the flush's other line landed
    transcripts = "".join(p.read_text() for p in (ws / "sessions").glob("cli_2*.jsonl*"))
    assert "my cat is named Luna" in transcripts  # the records stay as written
    stones = json.loads((ws / "state" / "forgotten.json").read_text())
    assert len(stones["items"]) == 1 and "luna" not in json.dumps(stones).lower()  # hashed


async def test_a_forget_of_one_letter_is_refused(fake_llm: FakeLLMServer, make_config: Callable[..., Any],
                                                workspace: Path) -> None:
    async with running(make_config()) as (gw, ch):
        (workspace / "USER.md").write_text("# User\n- lives in Lisbon\n- has a cat\n")
        await ch.say("/forget a", **OWNER)
        [reply] = await ch.wait_replies(1)
    assert reply.text.startswith("Not forgotten: 'a' is shorter than 4 characters")
    assert "/forget --confirm a" in reply.text
    assert (workspace / "USER.md").read_text() == "# User\n- lives in Lisbon\n- has a cat\n"
    assert not (workspace / "state" / "forgotten.json").exists()
