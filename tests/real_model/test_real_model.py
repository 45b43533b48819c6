"""The gateway against a stock llama.cpp server and a real small model (SmolLM2-135M).

The fake LLM in tests/fakes only knows what we taught it; this suite drives the real
``build_gateway`` wiring, litellm's real HTTP path and a real OpenAI-compatible server
that has its own quirks (tools ignored without ``tool_choice``, HTTP 500 on a tool-call
message without ``content``, empty plain answers in auto mode, a 4,096-token window).
The model is tiny and its judgement is poor, so every assertion is about plumbing —
a tool call happened and ran, a turn ended with a real reply, archiving and Dream moved
exactly what they processed — never about wording.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.real_model.llama_server import missing_reason

_REASON = missing_reason()
if _REASON is not None:
    pytest.skip(f"real-model suite skipped: {_REASON}", allow_module_level=True)

from lucidgate.config import Config  # noqa: E402  (after the module-level skip)
from lucidgate.gateway.app import Gateway, build_gateway  # noqa: E402
from lucidgate.gateway.agent.wire_messages import INTERRUPTED_RESULT  # noqa: E402
from lucidgate.memory.dream import DreamReport  # noqa: E402
from tests.fakes.channel import FakeChannel  # noqa: E402
from tests.real_model.llama_server import N_CTX, LlamaServer  # noqa: E402

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(2400)]

OWNER = "local"  # the cli channel's default owner
# Generous: on 2 cores shared with other work one turn has taken 8 minutes; what matters
# is that it ends (the guard and maxToolIterations bound it), not how fast.
TURN_DEADLINE_S = 1200.0
MAX_TOOL_ITERATIONS = 5  # enough to see the guard act (it stops a repeat at the 3rd step)
# The repeated-call guard runs an identical call (same tool, same arguments) twice; the
# third is not run and ends the turn. So no call appears in more than this many model steps.
MAX_IDENTICAL_STEPS = 3
PLACEHOLDER = "(no answer)"


def real_config(make_config: Callable[..., Config], server: LlamaServer, **overrides: Any) -> Config:
    """A 4k-window local model, configured the way docs/configuration.md's "Local models" says."""
    base: dict[str, Any] = {
        "agents": {"defaults": {
            "model": "openai/SmolLM2-135M-Instruct",
            "contextWindowTokens": N_CTX,
            "maxCompletionTokens": 256,
            "safetyBuffer": 256,
            "maxToolIterations": MAX_TOOL_ITERATIONS,
            "llmTimeoutS": 300,
            "llmRetries": 1,
            "llmRetryBaseDelayS": 0.2,
            "dream": {"maxIterations": 2},
        }},
        "providers": {"openai": {"apiKey": "", "apiBase": server.base_url}},
    }
    return make_config(api_base=server.base_url, **_merge(base, overrides))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@asynccontextmanager
async def running(config: Config, name: str = "cli") -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name=name, owners=gw.parts.config.channels.owners_of(name))
    gw.add_channel(name, channel)
    async with gw:
        yield gw, channel


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), sort_keys=True)
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True)


def turn_calls(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(every tool call the model asked for, tool results by call id) in ``messages``."""
    calls = [c for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    results = {str(m.get("tool_call_id")): m for m in messages if m.get("role") == "tool"}
    return calls, results


def identical_steps(messages: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """For each (tool, canonical arguments): in how many model steps it was asked for
    (one step may ask for the same call several times; the guard counts steps' calls)."""
    steps: Counter[tuple[str, str]] = Counter()
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            steps.update({(c["function"]["name"], _canonical(c["function"].get("arguments")))
                          for c in m["tool_calls"]})
    return steps


def evidence(gw: Gateway, server: LlamaServer, messages: list[dict[str, Any]]) -> str:
    """What a failing assertion shows: the transcript's shape and the server's last lines."""
    shape = []
    for m in messages:
        part = f"{m.get('role')}"
        if m.get("tool_calls"):
            part += " calls " + ", ".join(
                f"{c['function']['name']}({str(c['function'].get('arguments'))[:80]})" for c in m["tool_calls"])
        elif m.get("content") is not None:
            part += f": {str(m['content'])[:120]!r}"
        if m.get("status"):
            part += f" [{m['status']}]"
        shape.append(part)
    return ("\ntranscript:\n  " + "\n  ".join(shape) + f"\nserver log tail:\n{server.log_tail(25)}")


async def test_remember_turn_makes_a_real_tool_call_that_executes(
    llama_server: LlamaServer, make_config: Callable[..., Config]
) -> None:
    async with running(real_config(make_config, llama_server)) as (gw, ch):
        await ch.say("please remember that my cat is called Miso", sender_id=OWNER)
        [reply] = await ch.wait_replies(1, timeout=TURN_DEADLINE_S)
        session = await gw.parts.sessions.get("cli:1")
        messages = list(session.messages)
    why = evidence(gw, llama_server, messages)
    calls, results = turn_calls(messages)
    assert calls, f"the model made no tool call{why}"
    executed = [c for c in calls if c.get("id") in results
                and results[c["id"]].get("content") != INTERRUPTED_RESULT]
    assert executed, f"no tool call was executed{why}"
    (name, _), most = identical_steps(messages).most_common(1)[0]
    assert most <= MAX_IDENTICAL_STEPS, f"{name} repeated in {most} steps{why}"
    text = str(getattr(reply, "text", "")).strip()
    assert text and text != PLACEHOLDER, f"reply {reply!r}{why}"
    assert messages[-1]["role"] == "assistant", f"the turn did not close{why}"


async def test_plain_turn_answers(llama_server: LlamaServer, make_config: Callable[..., Config]) -> None:
    """An owner's small talk (tools offered): the turn ends with a real reply, whatever
    the model does with the tools — never the empty placeholder."""
    async with running(real_config(make_config, llama_server)) as (gw, ch):
        await ch.say("hello! how are you today?", sender_id=OWNER)
        [reply] = await ch.wait_replies(1, timeout=TURN_DEADLINE_S)
        session = await gw.parts.sessions.get("cli:1")
        messages = list(session.messages)
    why = evidence(gw, llama_server, messages)
    text = str(getattr(reply, "text", "")).strip()
    assert text and text != PLACEHOLDER, f"reply {reply!r}{why}"
    assert all(n <= MAX_IDENTICAL_STEPS for n in identical_steps(messages).values()), \
        f"a call looped{why}"


async def test_guest_turn_without_tools_gets_the_models_text(
    llama_server: LlamaServer, make_config: Callable[..., Config]
) -> None:
    """A guest has no tools, so no ``tools`` go out and the server answers in plain text."""
    config = real_config(make_config, llama_server, channels={"webhook": {"owners": ["boss"]}})
    async with running(config, name="webhook") as (gw, ch):
        await ch.say("hello! what is a cat?", sender_id="stranger")
        [reply] = await ch.wait_replies(1, timeout=TURN_DEADLINE_S)
        session = await gw.parts.sessions.get("webhook:1")
        messages = list(session.messages)
    why = evidence(gw, llama_server, messages)
    assert reply.kind == "text", f"{reply!r}{why}"
    text = str(getattr(reply, "text", "")).strip()
    assert text and text != PLACEHOLDER, f"reply {reply!r}{why}"
    assert [m["role"] for m in messages] == ["user", "assistant"], why


async def test_new_archives_the_conversation(
    llama_server: LlamaServer, make_config: Callable[..., Config], workspace: Path
) -> None:
    config = real_config(make_config, llama_server, channels={"webhook": {"owners": ["boss"]}})
    async with running(config, name="webhook") as (gw, ch):
        await ch.say("my cat is called Miso and she is three years old", sender_id="stranger")
        await ch.wait_replies(1, timeout=TURN_DEADLINE_S)
        session = await gw.parts.sessions.get("webhook:1")
        before = list(session.messages)
        await gw.parts.store.refresh()
        entries_before = len(await gw.parts.store.read_unprocessed(since=0, limit=10_000))
        await ch.say("/new", sender_id="stranger")
        replies = await ch.wait_replies(2, timeout=TURN_DEADLINE_S)
        fresh = await gw.parts.sessions.get("webhook:1")
        await gw.parts.store.refresh()
        entries = await gw.parts.store.read_unprocessed(since=0, limit=10_000)
    why = evidence(gw, llama_server, before)
    assert replies[-1].kind == "text", f"/new failed: {replies[-1]!r}{why}"
    assert fresh.messages == [] and fresh.last_consolidated == 0, why
    new_entries = entries[entries_before:]
    assert new_entries and all(e.session_key == "webhook:1" for e in new_entries), why
    archived = sorted((workspace / "sessions").glob("webhook_1.*.jsonl.old"))
    assert len(archived) == 1, f"the old transcript was not kept: {archived}"


def _history_entry(i: int) -> str:
    """A plausible, varied consolidation summary of ~200 tokens (cl100k)."""
    people = ["Ana", "Bruno", "Chen", "Dara", "Emeka", "Fatima", "Goran", "Hana"]
    topics = ["the garden shed", "the tax return", "a trip to Lisbon", "the bakery order",
              "the bicycle repair", "a piano lesson", "the roof leak", "the book club"]
    who, what = people[i % len(people)], topics[(i * 3) % len(topics)]
    bullets = [
        f"- On 2026-03-{i % 28 + 1:02d} the user talked with {who} about {what}; they agreed "
        f"that {who} will call back on Thursday with two quotes and a rough timeline.",
        f"- The user prefers short answers in the morning and detailed ones in the evening, "
        f"and asked to be reminded about {what} one day before the deadline (entry {i}).",
        f"- Problem solved: the printer in the study stopped working; unplugging it for ten "
        f"seconds and reinstalling driver version {i}.4.{i * 7 % 10} fixed it.",
        f"- Decision: the budget for {what} is {200 + 15 * i} euros, paid from the shared "
        f"account; {who} keeps the receipts in the blue folder on the shelf.",
        f"- The user's sister lives in Porto, works as a nurse, and visits every second "
        f"weekend; next visit planned for week {i % 52 + 1}, she likes green tea.",
        f"- The user corrected an earlier fact: the dentist appointment moved from Monday "
        f"to Wednesday 10:30, and the clinic's new phone number ends in {1000 + i}.",
    ]
    return "\n".join(bullets)


async def test_dream_on_a_4k_window_processes_every_entry_exactly_once(
    llama_server: LlamaServer, make_config: Callable[..., Config], workspace: Path
) -> None:
    """20 entries (Dream's default batch size) of ~200 tokens: more than the 4k window holds
    in one batch, which is how Dream used to skip entries forever. Every
    ``/dream`` must finish without error and move ``.dream_cursor`` exactly over what it
    processed, and repeated ``/dream`` must cover every entry once."""
    async with running(real_config(make_config, llama_server)) as (gw, ch):
        cursors = [await gw.parts.store.append_history(_history_entry(i), session_key="cli:1")
                   for i in range(20)]
        reports: list[DreamReport] = []
        real_run = gw.parts.dream.run

        async def recording_run(**kwargs: Any) -> DreamReport:
            report = await real_run(**kwargs)
            reports.append(report)
            return report

        gw.parts.dream.run = recording_run  # type: ignore[method-assign]
        cursor_after: list[int] = []
        for n in range(1, 9):
            await ch.say("/dream", sender_id=OWNER)
            await ch.wait_replies(n, timeout=TURN_DEADLINE_S)
            await gw.parts.store.refresh()
            cursor_after.append(gw.parts.store.dream_cursor())
            if reports[-1].processed is None or cursor_after[-1] >= cursors[-1]:
                break
    log = [f"{r.processed} error={r.error!r} stop={r.stop_reason!r}" for r in reports]
    assert reports, "no Dream ran"
    covered: list[int] = []
    previous = 0
    for report, after in zip(reports, cursor_after, strict=True):
        if report.processed is None:
            continue
        first, last = report.processed
        assert report.error is None, f"Dream failed on #{first}-#{last}: {report.error}\n{log}"
        assert first == previous + 1, f"entries skipped before #{first}\n{log}"
        assert after == last, f"cursor {after} after processing #{first}-#{last}\n{log}"
        covered.extend(c for c in cursors if first <= c <= last)
        previous = last
    assert covered == cursors, f"not every entry was processed once\n{log}"
