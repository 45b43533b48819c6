"""Several agents share what costs per process (issue 41: "one process, one model client, one
embedder shared by all agents"; an idle agent costs no work).

A gateway of three agents, each over its own workspace: their model clients make their calls
on one LLM I/O thread (litellm through the fake OpenAI server), and their recall indexes learn
of changed files from one watcher, which tells only the index whose workspace changed, and
sync on one background thread.
bench/bench_agents_idle.py measures what this saves (threads, idle CPU).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from lucidgate.config.schema import Config
from lucidgate.gateway.app import build_gateway
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply
from tests.waiting import until, until_async

AGENTS = ("home", "work", "play")
FACT = "The greenhouse key hangs behind the blue door."


def llm_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "llm-io"]


def named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


async def test_agents_share_one_llm_thread_and_one_watcher_that_wakes_only_the_changed_index(
        make_config: Callable[..., Config], tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    spaces = {a: tmp_path / a for a in AGENTS}
    config = make_config(
        agents={"defaults": {"llmRetries": 0, "dream": {"enabled": False},
                             "memory": {"search": {"embedding": {"model": "none"}, "watch": True}}},
                "list": [{"id": a, "workspace": str(ws)} for a, ws in spaces.items()]},
        bindings=[{"agent": a, "match": {"channel": "fake", "chat": a}} for a in AGENTS[1:]])
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, "fake", owners=("local",))
    gw.add_channel("fake", channel)
    recalls = {a: gw.agents[a].recall for a in AGENTS}
    for recall in recalls.values():
        assert recall is not None
        recall.start_delay_s = 0  # the first background sync now, not after the first turns
    before, syncs_before = len(llm_threads()), len(named("recall-sync"))
    fake_llm.queue(*(Reply(f"hi from {a}") for a in AGENTS))
    async with gw:
        models = [gw.agents[a].model for a in AGENTS]
        assert models[0] is not models[1] and models[0]._io is not None
        assert all(m._io is models[0]._io for m in models)  # one loop, one thread
        assert len(llm_threads()) == before + 1

        hubs = {id(r.hub) for r in recalls.values() if r is not None}
        assert len(hubs) == 1 and sorted(recalls["home"].hub.folders) == sorted(spaces.values())  # type: ignore[union-attr]
        assert [t.get_name() for t in asyncio.all_tasks()].count("recall-watch") == 1
        # One background sync thread and one query pool for all three indexes.
        assert len({id(r._executor) for r in recalls.values() if r is not None}) == 1
        assert len({id(r._recall_pool) for r in recalls.values() if r is not None}) == 1
        assert len(named("recall-sync")) == syncs_before + 1

        await until(lambda: all(r is not None and r.synced.is_set() for r in recalls.values()),
                    what="each index's first sync")
        (spaces["work"] / "memory" / "MEMORY.md").write_text(f"# Memory\n\n- {FACT}\n")

        async def found(agent: str) -> bool:
            recall = recalls[agent]
            assert recall is not None
            hits = await recall.search("greenhouse key", lazy_sync=False)  # only what a sync put there
            return any("greenhouse" in h.text for h in hits)

        await until_async(lambda: found("work"), what="the watcher to bring work's index up to date")
        assert not recalls["home"]._dirty and not recalls["play"]._dirty  # type: ignore[union-attr]
        assert not await found("home") and not await found("play")

        # The turns last: each writes its agent's transcript, which wakes that agent's index
        # whenever the write lands, so before the watcher's check it would make the check race.
        for a in AGENTS:
            await channel.say(f"hello {a}", chat_id=a, sender_id="local")
        replies = await channel.wait_replies(3)
        assert sorted(r.text for r in replies) == sorted(f"hi from {a}" for a in AGENTS)
    assert len(llm_threads()) == before  # the last client to close closed the shared thread
    assert len(named("recall-sync")) == syncs_before  # and the last index its threads
    assert recalls["home"].hub.folders == []  # type: ignore[union-attr]
