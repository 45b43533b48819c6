"""Consolidator (DESIGN §5.2) through the real LLM path: litellm -> the fake OpenAI server.

Every message carries a marker ``m<index>`` and every summary request names its range
("messages <first>-<last>"), so the fake summariser answers with that range and the tests
can check, from history.jsonl alone, that archived ranges are contiguous, ordered, never
overlapping and attributed to the right session.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.memory._boundaries import find_cut, protected_start
from lucidgate.memory.consolidation_prompt import RAW_CAP_CHARS, parse_summary, raw_entry
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.errors import MemoryStoreError
from lucidgate.memory.protocols import ChatResult
from lucidgate.memory.sessions import Session, SessionStore, load_session_file, persisted_last_consolidated
from lucidgate.memory.store import MemoryStore
from lucidgate.memory.tokens import count_message, count_messages, count_text
from tests.fakes.llm import Fail, FakeLLMServer, Reply

SYSTEM_TOKENS = 200
RANGE = re.compile(r"messages (\d+)-(\d+)")


class LiteLLMChat:
    """The gateway's real ``LiteLLMChatModel`` (litellm's HTTP path to the fake server), with
    a record of its calls and of how many summarisation calls overlap, per session and overall."""

    def __init__(self, model: LiteLLMChatModel) -> None:
        self.model = model
        self.calls: list[tuple[str, str | None, int | None]] = []
        self.inflight: Counter[str | None] = Counter()
        self.max_inflight: Counter[str | None] = Counter()
        self.total_inflight = 0
        self.max_total_inflight = 0

    async def complete(self, messages: list[dict[str, Any]], *, tools: Any = None, job: str,
                       session_key: str | None = None, max_tokens: int | None = None,
                       retries: int | None = None) -> ChatResult:
        self.calls.append((job, session_key, max_tokens))
        self.inflight[session_key] += 1
        self.total_inflight += 1
        self.max_inflight[session_key] = max(self.max_inflight[session_key], self.inflight[session_key])
        self.max_total_inflight = max(self.max_total_inflight, self.total_inflight)
        try:
            return await self.model.complete(messages, tools=tools, job=job, session_key=session_key,
                                             max_tokens=max_tokens, retries=retries)
        finally:
            self.inflight[session_key] -= 1
            self.total_inflight -= 1


async def estimate(session: Session) -> int:
    return SYSTEM_TOKENS + await asyncio.to_thread(count_messages, session.active())


def summarise_range(body: dict[str, Any]) -> Reply:
    """The fake summariser: one bullet naming the range it was asked about."""
    user = body["messages"][-1]["content"]
    first, last = RANGE.search(user).groups()
    return Reply(f"Sure, here are the facts:\n- facts of m{first}..m{last}\n- second bullet")


@pytest.fixture
def sessions(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "sessions")


@pytest.fixture
def store(workspace: Path) -> MemoryStore:
    return MemoryStore(workspace)


@pytest.fixture
def chat(fake_llm: FakeLLMServer, make_config: Callable[..., Any]) -> Iterator[LiteLLMChat]:
    fake_llm.default = summarise_range
    model = LiteLLMChatModel(make_config(agents={"defaults": {"llmRetries": 0, "llmRetryBaseDelayS": 0.01}}))
    yield LiteLLMChat(model)
    model.close()


@pytest.fixture
def events() -> list[str]:
    return []


@pytest.fixture
def make(sessions: SessionStore, store: MemoryStore, chat: LiteLLMChat, events: list[str]):
    def build(budget: int, **kwargs: Any) -> Consolidator:
        return Consolidator(sessions, store, chat, estimate=estimate, budget=budget,
                            on_event=events.append, **kwargs)
    return build


# ----------------------------------------------------------------------------- helpers

def user(i: int, words: int = 20) -> dict[str, Any]:
    return {"role": "user", "content": f"m{i} " + "hello there " * words,
            "timestamp": "2026-04-03T10:15:00+00:00"}


def reply(i: int, words: int = 20) -> dict[str, Any]:
    return {"role": "assistant", "content": f"m{i} " + "sure thing " * words}


def exchange(i: int, call_id: str, words: int = 20) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}.md"})}}
    return [{"role": "assistant", "content": f"m{i} reading", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "name": "read_file",
             "content": f"m{i + 1} " + "file line " * words}]


def history(store: MemoryStore) -> list[dict[str, Any]]:
    if not store.history_path.exists():
        return []
    return [json.loads(line) for line in store.history_path.read_text().splitlines() if line]


def ranges(entries: list[dict[str, Any]], key: str) -> list[tuple[int, int]]:
    out = []
    for entry in entries:
        if entry["session_key"] != key:
            continue
        match = re.search(r"m(\d+)\.\.m(\d+)", entry["content"]) or RANGE.search(entry["content"])
        out.append((int(match.group(1)), int(match.group(2))))
    return out


def assert_contiguous(spans: list[tuple[int, int]], end: int) -> None:
    """Ranges start at 0, follow each other without gap or overlap, and stop at ``end``."""
    expected = 0
    for first, last in spans:
        assert first == expected, spans
        assert last >= first
        expected = last + 1
    assert expected == end, (spans, end)


def legal_cut(messages: list[dict[str, Any]], end: int) -> bool:
    """A chunk may end before a user message or after a completed tool exchange."""
    if end == len(messages) or messages[end]["role"] == "user":
        cut_ok = True
    else:
        cut_ok = messages[end - 1]["role"] == "tool" and messages[end]["role"] != "tool"
    answered = {m["tool_call_id"] for m in messages[end:] if m["role"] == "tool"}
    asked = {c["id"] for m in messages[:end] for c in m.get("tool_calls") or []}
    return cut_ok and not (asked & answered)


# ----------------------------------------------------------------------------- the long session

async def test_long_session_consolidates_in_rounds(sessions, store, chat, make, events):
    consolidator = make(budget=1500)
    session = await sessions.get("telegram:42")
    marks: list[int] = []
    i = 0
    call = 0
    while len(session.messages) < 500:
        await sessions.append(session, user(len(session.messages)))
        newest = len(session.messages) - 1
        await consolidator.before_turn(session)
        assert await estimate(session) <= consolidator.budget
        assert session.last_consolidated <= newest  # the turn being answered stays
        marks.append(session.last_consolidated)
        if i % 3 == 1:
            call += 1
            await sessions.append(session, *exchange(len(session.messages), f"c{call}"))
        await sessions.append(session, reply(len(session.messages)))
        consolidator.schedule(session.key)
        if i % 4 == 0:
            await consolidator.drain()
            marks.append(session.last_consolidated)
        i += 1
    await consolidator.drain()
    marks.append(session.last_consolidated)

    assert marks == sorted(marks), "last_consolidated went backwards"
    entries = history(store)
    spans = ranges(entries, "telegram:42")
    assert len(spans) >= 8, "consolidation should have fired many times"
    assert_contiguous(spans, session.last_consolidated)
    assert [e["cursor"] for e in entries] == sorted({e["cursor"] for e in entries})
    full = await sessions.transcript(session)  # the archived prefix is read back from the file
    for _, last in spans:
        assert legal_cut(full, last + 1), last
    assert {c[0] for c in chat.calls} == {"consolidation"}
    assert {c[1] for c in chat.calls} == {"telegram:42"}
    assert events.count("archived") == len(spans)
    # The header on disk agrees with memory: the prompt after a restart is the same.
    reloaded = load_session_file(session.path, session.key)
    assert reloaded.last_consolidated == session.last_consolidated
    assert len(reloaded.messages) == len(session.messages)


async def test_every_request_fits_the_budget(sessions, make, fake_llm):
    consolidator = make(budget=1200, answer_tokens=300)
    assert consolidator.chunk_tokens <= 600
    session = await sessions.get("cli:fit")
    for n in range(60):
        await sessions.append(session, user(2 * n), reply(2 * n + 1))
    await sessions.append(session, user(120))
    await consolidator.before_turn(session)
    assert fake_llm.requests
    for body in fake_llm.requests:
        assert count_messages(body["messages"]) <= consolidator.budget
        assert body["max_tokens"] == 300  # the configured answer budget, not a fixed 1,024


async def test_under_budget_does_nothing(sessions, store, make, fake_llm, events):
    consolidator = make(budget=100_000)
    session = await sessions.get("cli:small")
    await sessions.append(session, user(0), reply(1), user(2))
    await consolidator.before_turn(session)
    consolidator.schedule(session.key)
    await consolidator.drain()
    assert session.last_consolidated == 0
    assert fake_llm.requests == [] and history(store) == []
    assert events == ["noop", "noop"]


# ----------------------------------------------------------------------------- giant turns

async def test_one_giant_turn_still_makes_progress(sessions, store, make, fake_llm):
    consolidator = make(budget=2000, max_rounds=5)
    session = await sessions.get("cli:giant")
    await sessions.append(session, user(0))
    for n in range(200):
        await sessions.append(session, *exchange(len(session.messages), f"g{n}"))
    await sessions.append(session, reply(len(session.messages)), user(len(session.messages) + 1))
    newest = len(session.messages) - 1

    await consolidator.before_turn(session)
    first = session.last_consolidated
    assert 0 < first < newest
    assert len(fake_llm.requests) == 5  # max_rounds, every one moved
    full = await sessions.transcript(session)  # the archived prefix is read back from the file
    for _, last in ranges(history(store), session.key):
        end = last + 1
        assert full[end - 1]["role"] == "tool"  # after a completed exchange
        assert full[end]["role"] == "assistant"
        assert legal_cut(full, end)

    for _ in range(30):
        if await estimate(session) <= consolidator.budget:
            break
        await consolidator.before_turn(session)
    assert await estimate(session) <= consolidator.budget
    assert session.last_consolidated <= newest
    assert_contiguous(ranges(history(store), session.key), session.last_consolidated)


async def test_oversize_unit_is_taken_whole_and_truncated(sessions, store, make, fake_llm):
    consolidator = make(budget=1000)
    session = await sessions.get("cli:huge")
    huge = {"role": "user", "content": "m0 START " + "blah " * 5000 + " FINISH"}
    await sessions.append(session, huge, reply(1), user(2))
    await consolidator.before_turn(session)
    assert session.last_consolidated == 2  # the whole first turn, never half of it
    [body] = fake_llm.requests
    transcript = body["messages"][-1]["content"]
    assert "tokens omitted" in transcript and "START" in transcript and "m1" in transcript
    assert count_messages(body["messages"]) <= consolidator.budget
    assert ranges(history(store), session.key) == [(0, 1)]


async def test_huge_tool_result_cuts_after_its_exchange(sessions, make, fake_llm):
    consolidator = make(budget=1000)
    session = await sessions.get("cli:bigtool")
    big = exchange(1, "b1", words=4000)
    await sessions.append(session, user(0), *big, *exchange(3, "b2"), reply(5), user(6))
    moved = await consolidator.force_round(session)
    assert moved
    assert session.last_consolidated == 3  # user + the one oversize exchange
    assert count_messages(fake_llm.requests[0]["messages"]) <= consolidator.budget


async def test_newest_user_message_is_never_archived(sessions, store, make, fake_llm, events):
    consolidator = make(budget=500)
    session = await sessions.get("cli:only")
    await sessions.append(session, {"role": "user", "content": "m0 " + "long question " * 800})
    await consolidator.before_turn(session)
    assert session.last_consolidated == 0
    assert await consolidator.force_round(session) is False
    assert fake_llm.requests == [] and history(store) == []
    assert events.count("noop") >= 2 and "archived" not in events

    # A resumed turn: its tool steps after the newest user message are protected too.
    await sessions.append(session, *exchange(1, "r1", words=400), user(3), *exchange(4, "r2", 400))
    assert await consolidator.force_round(session) is True
    assert session.last_consolidated == 3
    assert await consolidator.force_round(session) is False
    assert session.messages[session.last_consolidated]["role"] == "user"


# ----------------------------------------------------------------------------- failures

@pytest.mark.parametrize("scripted", [[Fail(500, "boom")], [Reply(""), Reply("")], [Reply("I cannot help with that.")]],
                         ids=["http-500", "empty-twice", "prose"])
async def test_summary_failure_archives_raw(sessions, store, make, fake_llm, events, scripted):
    consolidator = make(budget=3000)
    session = await sessions.get("slack:C1")
    long_user = {"role": "user", "content": "m0 my name is Ada " + "detail " * 3000}
    await sessions.append(session, long_user, reply(1), user(2))
    fake_llm.queue(*scripted)
    await consolidator.before_turn(session)

    # No hidden retries; an empty answer is asked again once (the model client's rule).
    assert len(fake_llm.requests) == len(scripted)
    [entry] = history(store)
    assert entry["session_key"] == "slack:C1"
    assert entry["content"].startswith("[RAW]")
    assert "user: m0 my name is Ada" in entry["content"]
    assert len(entry["content"]) <= RAW_CAP_CHARS
    assert "truncated" in entry["content"] and "session file" in entry["content"]
    assert session.last_consolidated == 2
    assert events.count("raw_fallback") == 1


async def test_nothing_answer_advances_without_an_entry(sessions, store, make, fake_llm, events):
    consolidator = make(budget=600)
    session = await sessions.get("cli:nothing")
    await sessions.append(session, user(0, 200), reply(1, 200), user(2))
    fake_llm.queue(Reply("(nothing)"))
    await consolidator.before_turn(session)
    assert session.last_consolidated == 2
    assert history(store) == []
    assert events == ["archived"]


async def test_store_failure_keeps_messages_active(sessions, workspace, chat, fake_llm):
    class BrokenStore(MemoryStore):
        async def append_history(self, content: str, *, session_key: str | None = None,
                                 **provenance: Any) -> int:
            raise MemoryStoreError("disk full; free space and retry")

    consolidator = Consolidator(sessions, BrokenStore(workspace), chat, estimate=estimate,
                                budget=600)
    session = await sessions.get("cli:broken")
    await sessions.append(session, user(0, 200), reply(1, 200), user(2))
    await consolidator.before_turn(session)  # logged, the turn goes on
    assert session.last_consolidated == 0
    assert persisted_last_consolidated(session.path) == 0
    with pytest.raises(MemoryStoreError):
        await consolidator.archive_all(session)  # /new must learn that it failed
    assert session.last_consolidated == 0


async def test_history_is_written_before_the_header_moves(sessions, workspace, chat, fake_llm):
    seen: list[tuple[int, int]] = []

    class WatchingStore(MemoryStore):
        async def append_history(self, content: str, *, session_key: str | None = None,
                                 **provenance: Any) -> int:
            path = sessions.path_for(session_key)
            seen.append((persisted_last_consolidated(path), len(history(self))))
            return await super().append_history(content, session_key=session_key, **provenance)

    class CrashingSessions(SessionStore):
        crash = True

        async def set_last_consolidated(self, session: Session, count: int) -> None:
            if self.crash:
                raise OSError("power cut")
            await super().set_last_consolidated(session, count)

    crashing = CrashingSessions(sessions.dir)
    watcher = WatchingStore(workspace)
    consolidator = Consolidator(crashing, watcher, chat, estimate=estimate, budget=600)
    session = await crashing.get("cli:crash")
    await crashing.append(session, user(0, 200), reply(1, 200), user(2))

    await consolidator.before_turn(session)
    assert seen == [(0, 0)]  # header still at 0 when the entry was written
    assert ranges(history(watcher), session.key) == [(0, 1)]  # the chunk is in memory...
    assert persisted_last_consolidated(session.path) == 0  # ...and still in the session

    crashing.crash = False  # "restart": the chunk is archived again, never lost
    await consolidator.before_turn(session)
    assert ranges(history(watcher), session.key) == [(0, 1), (0, 1)]
    assert persisted_last_consolidated(session.path) == 2


# ----------------------------------------------------------------------------- concurrency

async def test_one_consolidation_at_a_time_per_session(sessions, store, make, fake_llm, chat):
    fake_llm.latency = 0.05
    consolidator = make(budget=1500)
    session = await sessions.get("telegram:7")
    for n in range(40):
        await sessions.append(session, user(2 * n), reply(2 * n + 1))
    await sessions.append(session, user(80))

    consolidator.schedule(session.key)
    consolidator.schedule(session.key)
    await asyncio.gather(consolidator.before_turn(session), consolidator.before_turn(session),
                         consolidator.force_round(session))
    consolidator.schedule(session.key)
    await consolidator.drain()

    assert chat.max_inflight["telegram:7"] == 1
    spans = ranges(history(store), session.key)
    assert len(spans) >= 2
    assert_contiguous(spans, session.last_consolidated)
    assert await estimate(session) <= consolidator.budget


async def test_schedule_while_running_only_marks_a_recheck(sessions, make, fake_llm, events):
    fake_llm.latency = 0.05
    consolidator = make(budget=1500, max_rounds=1)
    session = await sessions.get("cli:again")
    for n in range(40):
        await sessions.append(session, user(2 * n), reply(2 * n + 1))
    await sessions.append(session, user(80))

    consolidator.schedule(session.key)
    await fake_llm.wait_for_requests(1)
    for _ in range(5):
        consolidator.schedule(session.key)  # coalesce into one re-check
    await consolidator.drain()
    # First run: one round (max_rounds=1); the single re-check: one more round.
    assert events == ["archived", "archived"]
    assert len(fake_llm.requests) == 2


async def test_twenty_sessions_at_once(sessions, store, make, fake_llm, chat):
    fake_llm.latency = 0.02
    consolidator = make(budget=1200)
    keys = [f"webhook:s{n}" for n in range(20)]
    all_sessions = []
    for key in keys:
        session = await sessions.get(key)
        for n in range(20):
            await sessions.append(session, user(2 * n), reply(2 * n + 1))
        await sessions.append(session, user(40))
        all_sessions.append(session)

    for key in keys[:10]:
        consolidator.schedule(key)
    await asyncio.gather(*(consolidator.before_turn(s) for s in all_sessions[10:]))
    await consolidator.drain()

    entries = history(store)
    cursors = [e["cursor"] for e in entries]
    assert len(set(cursors)) == len(cursors) and cursors == sorted(cursors)
    for session in all_sessions:
        spans = ranges(entries, session.key)
        assert spans, session.key
        assert_contiguous(spans, session.last_consolidated)
        assert await estimate(session) <= consolidator.budget
    assert max(chat.max_inflight.values()) == 1
    assert chat.max_total_inflight > 1  # sessions really ran side by side


async def test_background_failure_is_contained(sessions, store, chat, fake_llm):
    calls = 0

    async def flaky(session: Session) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("estimator bug")
        return await estimate(session)

    consolidator = Consolidator(sessions, store, chat, estimate=flaky, budget=600)
    session = await sessions.get("cli:flaky")
    await sessions.append(session, user(0, 200), reply(1, 200), user(2))
    consolidator.schedule(session.key)
    await consolidator.drain()
    assert session.last_consolidated == 0
    consolidator.schedule(session.key)  # the next check still works
    await consolidator.drain()
    assert session.last_consolidated == 2


# ----------------------------------------------------------------------------- /new

async def test_archive_all(sessions, store, make, fake_llm):
    consolidator = make(budget=1000)
    session = await sessions.get("telegram:new")
    call = 0
    for n in range(15):
        await sessions.append(session, user(len(session.messages)))
        if n % 2:
            call += 1
            await sessions.append(session, *exchange(len(session.messages), f"a{call}"))
        await sessions.append(session, reply(len(session.messages)))
    await sessions.append(session, user(len(session.messages)))  # even a pending turn goes

    await consolidator.archive_all(session)
    assert session.last_consolidated == len(session.messages)
    assert persisted_last_consolidated(session.path) == len(session.messages)
    spans = ranges(history(store), session.key)
    assert len(spans) >= 2  # token-bounded chunks, not one giant call
    assert_contiguous(spans, len(session.messages))
    for body in fake_llm.requests:
        assert count_messages(body["messages"]) <= consolidator.budget

    await consolidator.archive_all(session)  # nothing left: no call, no entry
    assert len(history(store)) == len(spans)


# ----------------------------------------------------------------------------- pure parts

def _conversation(shape: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Turns given as (tool exchanges, words); the last exchange of a turn may be cut off."""
    messages: list[dict[str, Any]] = []
    call = 0
    for exchanges, words in shape:
        messages.append(user(len(messages), words))
        for _ in range(exchanges):
            call += 1
            messages.extend(exchange(len(messages), f"h{call}", words))
        messages.append(reply(len(messages), words))
    return messages


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 120)), min_size=1, max_size=12),
       bound=st.integers(1, 1500))
def test_boundary_search_always_moves_and_stays_legal(shape, bound):
    messages = _conversation(shape)
    start, protect = 0, protected_start(messages, 0)
    while start < protect:
        cut = find_cut(messages[start:protect], bound, before_user=True)
        assert cut is not None and cut.end > 0
        end = start + cut.end
        assert legal_cut(messages, end)
        assert cut.tokens == sum(count_message(m) for m in messages[start:end])
        # Over the bound only when no shorter legal chunk exists (the smallest legal unit).
        assert cut.oversize == (cut.tokens > bound)
        if cut.oversize:
            assert not any(legal_cut(messages, e) for e in range(start + 1, end)), (start, end)
        start = end
    assert start == protect
    assert messages[protect]["role"] == "user"


def test_boundary_prefers_a_user_turn_and_respects_interrupted_calls():
    interrupted = exchange(2, "x1")[:1]  # a call whose result never arrived
    messages = [user(0), reply(1), *interrupted, user(3), *exchange(4, "x2"), reply(6), user(7)]
    cut = find_cut(messages[:7], 10_000, before_user=True)
    assert cut.end == 7 and cut.kind == "user"
    small = find_cut(messages[:7], 80, before_user=True)
    assert small.kind == "user" and small.end == 3  # before user(3), past the dead call
    assert find_cut([], 100, before_user=False) is None


def test_boundary_never_orphans_a_late_tool_result():
    # A resumed turn can persist the new user message before the interrupted call's
    # result: cutting before that user message would leave "tool z" without its call.
    call, result = exchange(1, "z")
    messages = [user(0), call, user(2), result, reply(4), user(5)]
    for bound in (1, 60, 10_000):
        cut = find_cut(messages[:5], bound, before_user=True)
        assert cut.end in (4, 5), (bound, cut)
        assert legal_cut(messages, cut.end)


def test_summary_parsing_and_raw_cap():
    assert parse_summary("- a\n  * b\n1. c") == "- a\n  - b\n- c"
    assert parse_summary("```\n- fenced\n```") == "- fenced"
    assert parse_summary(" (nothing) ") == ""
    assert parse_summary("- (nothing)") == ""
    for garbage in (None, "", "   ", "No facts here, sorry."):
        assert parse_summary(garbage) is None
    entry = raw_entry([user(0, 5000)], first=0, last=0)
    assert entry.startswith("[RAW]") and len(entry) <= RAW_CAP_CHARS
    short = raw_entry([user(0, 2)], first=0, last=0)
    assert "truncated" not in short and "m0 hello there" in short
    assert count_text(entry) > 0
