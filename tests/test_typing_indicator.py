"""The one typing indicator every platform channel uses: shown at once, refreshed while the
turn runs, ended by the reply, by a failing call, by the channel stopping, or by its cap.

Driven by events (the fake ``show`` counts calls and signals) with deadlines that fail fast."""

from __future__ import annotations

import asyncio
import logging

import pytest

from lucidgate.channels.typing_indicator import TypingIndicator

DEADLINE_S = 5.0


class Shows:
    """A platform's "typing" call that records each target and signals at a count."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[str] = []
        self.fail_at = fail_at
        self._waiting: list[tuple[int, asyncio.Event]] = []

    async def __call__(self, target: str) -> None:
        self.calls.append(target)
        for count, event in self._waiting:
            if len(self.calls) >= count:
                event.set()
        if self.fail_at is not None and len(self.calls) >= self.fail_at:
            raise RuntimeError("the platform call broke")

    async def reach(self, count: int) -> None:
        event = asyncio.Event()
        if len(self.calls) >= count:
            return
        self._waiting.append((count, event))
        await asyncio.wait_for(event.wait(), DEADLINE_S)


async def test_it_shows_at_once_repeats_while_the_turn_runs_and_the_reply_stops_it() -> None:
    shows = Shows()
    typing = TypingIndicator("t", shows, refresh_s=0.001, max_s=3600)
    await typing.start("chat")
    assert shows.calls == ["chat"]  # shown before start returns, not on the first refresh
    task = typing.task("chat")
    assert task is not None and not task.done()
    await typing.start("chat")  # a second typing message of the same turn starts nothing new
    assert typing.task("chat") is task
    await shows.reach(4)  # refreshed again and again while no reply came
    assert typing.stop("chat") is True  # the reply
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and typing.task("chat") is None
    assert set(shows.calls) == {"chat"}
    assert typing.stop("chat") is False  # nothing left to stop


async def test_a_failing_call_ends_that_chats_loop_and_the_next_turn_starts_afresh(
        caplog: pytest.LogCaptureFixture) -> None:
    shows = Shows(fail_at=2)
    typing = TypingIndicator("t", shows, refresh_s=0.001, max_s=3600)
    await typing.start("chat")
    task = typing.task("chat")
    assert task is not None
    with caplog.at_level(logging.ERROR, logger="lucidgate.channels.typing_indicator"):
        await asyncio.wait_for(task, DEADLINE_S)  # ends by itself, with no reply
    assert not task.cancelled() and typing.task("chat") is None and len(shows.calls) == 2
    assert any("typing indicator for chat failed" in r.getMessage() for r in caplog.records)
    assert typing.stop("chat") is False  # the reply finds nothing running
    shows.fail_at = None
    await typing.start("chat")
    assert len(shows.calls) == 3 and typing.task("chat") not in (None, task)
    typing.cancel_all()


async def test_chats_are_separate_and_the_key_decides_what_is_one_chat() -> None:
    shows = Shows()
    typing: TypingIndicator[str] = TypingIndicator("t", shows, refresh_s=3600, max_s=3600,
                                                   key=lambda target: target.split("/")[0])
    await typing.start("a/thread-1")
    await typing.start("a/thread-2")  # same key: the running indicator serves it
    await typing.start("b/thread-1")
    assert shows.calls == ["a/thread-1", "b/thread-1"]
    a, b = typing.task("a/x"), typing.task("b/x")
    assert a is not None and b is not None
    typing.stop("a/thread-1")
    await asyncio.gather(a, return_exceptions=True)
    assert a.cancelled() and not b.done()  # the other chat's turn still shows typing
    typing.cancel_all()  # the channel stops
    await asyncio.gather(b, return_exceptions=True)
    assert b.cancelled() and typing.task("b/x") is None


async def test_the_cap_ends_the_indicator_of_a_turn_that_never_answers() -> None:
    shows = Shows()
    typing = TypingIndicator("t", shows, refresh_s=0.001, max_s=0)
    await typing.start("chat")
    task = typing.task("chat")
    assert task is not None
    await asyncio.wait_for(task, DEADLINE_S)
    assert not task.cancelled() and shows.calls == ["chat"] and typing.task("chat") is None
