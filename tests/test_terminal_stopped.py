"""The terminal channel after Ctrl-C: the stopped turn's own "Stopped." is not shown later as
if it were typed at the prompt; messages nobody asked for (a reminder) still are.

In-process against the real gateway in agent mode and the fake model, so the order that
showed the bug is forced rather than hoped for: the terminal gives up on its ask before the
turn's "Stopped." arrives (with a slow model it always did).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from lucidgate.channels.cli import CliChannel
from lucidgate.channels.messages import OutboundText, Target
from lucidgate.gateway.app import build_gateway
from tests.fakes.llm import FakeLLMServer, HeldReply, Reply


async def test_a_stopped_asks_late_answer_is_not_shown_but_a_reminder_is(
    make_config: Callable[..., Any], fake_llm: FakeLLMServer
) -> None:
    release = threading.Event()  # the slow model: it answers only once the test is done
    fake_llm.queue(HeldReply("a long story", release), Reply("after the stop"))
    shown: list[str] = []
    gw = build_gateway(make_config(), "agent", on_unsolicited=shown.append)
    cli = gw.channel("cli")
    assert isinstance(cli, CliChannel)
    try:
        async with gw:
            story = asyncio.create_task(cli.ask("write me a long story"))
            await fake_llm.wait_for_requests(1)
            story.cancel()  # Ctrl-C: the terminal stops waiting for this answer...
            await asyncio.gather(story, return_exceptions=True)
            ok, _ = await cli.ask("/stop")  # ...and stops the turn, which then says "Stopped."
            assert ok
            # One chat, one ordered lane: "Stopped." has reached the channel before this answer.
            assert await cli.ask("are you there?") == (True, "after the stop")
            await cli.send(OutboundText(Target("cli", "local"), "a reminder"))
            release.set()
    finally:
        release.set()
    assert shown == ["a reminder"]
