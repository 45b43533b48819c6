"""A "summary" that only repeats the summariser's instructions is not filed as memory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.gateway.app import build_gateway
from lucidgate.memory.consolidation_prompt import SYSTEM_PROMPT, echoes_instructions, parse_summary
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Func, Reply, Scripted

# What a small model answered: the rules, reshaped as bullets (reworded a little, cut short).
ECHO = """Here is the summary:
- What the user said about themselves, their people, work, projects, plans and circumstances
- Problems that were solved, with the solution that worked (not the failed attempts).
- Decisions and commitments: what was decided, who will do what, by when
- Each bullet must make sense on its own without the conversation
- Keep names, numbers, dates, paths and spellings exactly as written.
- No headings and no preamble"""

FACTS = """- The user's cat is called Miso and is three years old.
- The user moves to Lisbon on 2026-05-01 and will rent a flat near Alfama.
- Decision: the user will call the vet on Friday about Miso's vaccination.
- Never guess or invent."""  # one echoed rule among real facts is still a summary


def test_an_echo_of_the_instructions_is_garbage_but_facts_pass() -> None:
    assert parse_summary(ECHO) is None
    assert parse_summary(SYSTEM_PROMPT) is None  # the whole prompt parroted back
    kept = parse_summary(FACTS)
    assert kept is not None and "Miso" in kept and kept.count("\n- ") == 3
    assert parse_summary("- Miso\n- Keep names") == "- Miso\n- Keep names"  # too short to judge
    assert not echoes_instructions(["- the user asked to keep names of the cats in a list"])
    assert echoes_instructions(["1. Events, with absolute dates taken from the timestamps."])


async def test_an_echoed_summary_is_archived_raw(
    fake_llm: FakeLLMServer, make_config: Callable[..., Any], workspace: Path
) -> None:
    def answer(body: dict[str, Any]) -> Scripted:
        if body["messages"][0].get("content") == SYSTEM_PROMPT:
            return Reply(ECHO)
        return Reply("Noted, Miso it is.")

    fake_llm.default = Func(answer).fn
    gw = build_gateway(make_config())
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        await channel.say("my cat is called Miso", sender_id="local")
        await channel.wait_replies(1, timeout=60)
        await channel.say("/new", sender_id="local")
        replies = await channel.wait_replies(2, timeout=60)
    assert replies[1].kind == "text"
    entries = [json.loads(line) for line in
               (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    assert len(entries) == 1
    content = entries[0]["content"]
    assert content.startswith("[RAW]") and "my cat is called Miso" in content
    assert "Each bullet must make sense" not in content
