"""The consolidator's per-session queue (``config/keyed.py`` ``KeyedWorkers``): one piece of
consolidation per session at a time, in order; a caller that gives up waiting leaves nothing
held; ``drain`` waits for all of it; and a background check runs in no caller's context."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import pytest
import pytest_asyncio

from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.memory.consolidator import Consolidator
from lucidgate.memory.sessions import Session, SessionStore
from lucidgate.memory.store import MemoryStore
from tests.fakes.llm import FakeLLMServer
from tests.test_consolidator import LiteLLMChat, estimate, history, reply, summarise_range, user

WAIT_S = 30.0  # a deadline that fails the test instead of hanging it
CALLER: ContextVar[str | None] = ContextVar("caller", default=None)


class GatedChat(LiteLLMChat):
    """The real model client, held at the door: each call announces itself and waits for
    ``opened`` before it goes to the fake server. It records the ``CALLER`` it ran under."""

    def __init__(self, model: LiteLLMChatModel) -> None:
        super().__init__(model)
        self.arrived = asyncio.Event()
        self.opened = asyncio.Event()
        self.callers: list[str | None] = []

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.callers.append(CALLER.get())
        self.arrived.set()
        await asyncio.wait_for(self.opened.wait(), WAIT_S)
        return await super().complete(messages, **kwargs)


@pytest_asyncio.fixture
async def gated(fake_llm: FakeLLMServer, make_config: Callable[..., Any]) -> AsyncIterator[GatedChat]:
    fake_llm.default = summarise_range
    model = LiteLLMChatModel(make_config(agents={"defaults": {"llmRetries": 0}}))
    await model.start()  # litellm imported before the clock of any held call starts
    yield GatedChat(model)
    model.close()


@pytest.fixture
def consolidator(tmp_path: Any, workspace: Any, gated: GatedChat) -> Consolidator:
    return Consolidator(SessionStore(tmp_path / "sessions"), MemoryStore(workspace), gated,
                        estimate=estimate, budget=1500, max_rounds=1)


async def long_session(consolidator: Consolidator, key: str) -> Session:
    sessions = consolidator._sessions
    session = await sessions.get(key)
    for n in range(40):
        await sessions.append(session, user(2 * n), reply(2 * n + 1))
    await sessions.append(session, user(80))
    return session


async def test_drain_waits_for_consolidation_in_place_as_well_as_in_the_background(
        consolidator: Consolidator, gated: GatedChat) -> None:
    session = await long_session(consolidator, "telegram:1")
    in_place = asyncio.create_task(consolidator.before_turn(session))
    await asyncio.wait_for(gated.arrived.wait(), WAIT_S)
    drained = asyncio.create_task(consolidator.drain())
    for _ in range(20):  # let the drain run as far as it can while the summary is held
        await asyncio.sleep(0)
    assert not drained.done(), "drain returned while a session was still consolidating"
    gated.opened.set()
    await asyncio.wait_for(drained, WAIT_S)
    assert in_place.done() and in_place.exception() is None
    assert session.last_consolidated > 0


async def test_a_caller_that_gives_up_waiting_leaves_the_session_free(
        consolidator: Consolidator, gated: GatedChat) -> None:
    session = await long_session(consolidator, "telegram:2")
    consolidator.schedule(session.key)  # holds the session: its summary waits at the door
    await asyncio.wait_for(gated.arrived.wait(), WAIT_S)
    waiting = asyncio.create_task(consolidator.force_round(session))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()  # queued behind the check
    waiting.cancel()  # e.g. /stop: the turn that wanted it is gone
    with pytest.raises(asyncio.CancelledError):
        await waiting
    gated.opened.set()
    await asyncio.wait_for(consolidator.drain(), WAIT_S)
    # The cancelled caller never ran; the session is not held by it: the next one goes through.
    assert len(gated.callers) == 1
    after_check = session.last_consolidated
    assert after_check > 0
    assert await asyncio.wait_for(consolidator.force_round(session), WAIT_S) is True
    assert session.last_consolidated > after_check
    assert len(history(consolidator._store)) == 2  # one chunk each: the check's, then the round's


async def test_a_background_check_runs_in_no_callers_context(
        consolidator: Consolidator, gated: GatedChat) -> None:
    """A check scheduled from inside some turn's context must not spend as that turn (its role
    and token budget are ContextVars); consolidating in place does run as its caller."""
    gated.opened.set()
    session = await long_session(consolidator, "telegram:3")
    token = CALLER.set("a guest's turn")
    try:
        consolidator.schedule(session.key)
        await asyncio.wait_for(consolidator.drain(), WAIT_S)
        await consolidator.force_round(session)
    finally:
        CALLER.reset(token)
    assert gated.callers == [None, "a guest's turn"]

