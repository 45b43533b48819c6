"""Event-loop stall under load, and the worker/lane gauges after a burst of chats.

Three runs through the in-process gateway at default settings (recall index included), the
fake LLM in its own process answering short:

- ``sessions``: 20 sessions at once, ``--per-session`` turns each (10);
- ``long``: one session of ``--turns`` turns (1,000), one after the other;
  (both after one warm-up message: litellm's first call initialises itself, ~50 ms once)
- ``burst``: ``--chats`` distinct chats (5,000) send one ``/help`` each (a session worker
  and a delivery lane per chat, no model call), then the gateway is left idle; prints the
  ``lucid_session_workers`` / ``lucid_delivery_lanes`` gauges before, at the peak and after
  ``--idle-s`` (``gateway.workerIdleS``; default 60, as an operator would leave it).

Two measures of a stall:

- *probe*: a task sleeps 5 ms in a loop; how late it wakes. This is what a user feels, but on
  a shared machine it also counts the time the OS gave the CPU to other processes;
- *busy*: the CPU time (``time.thread_time``) the loop thread spends in each single callback
  or task step — the work that holds the loop, whatever else runs on the machine. A full
  garbage collection lands inside whichever step allocated last, so their count and longest
  pause are printed beside it.

Not a test: it prints numbers. Run: ``.venv/bin/python bench/bench_loop_stall.py [--only sessions|long|burst]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_agent import ExternalFakeLLM, pct  # noqa: E402  (sets TIKTOKEN_CACHE_DIR too)
from lucidgate.config.schema import Config  # noqa: E402
from tests.fakes.channel import FakeChannel  # noqa: E402

PROBE_S = 0.005
TEXT = "message {i}: the quick brown fox jumps over the lazy dog, and then asks about {i}"


def make_config(workspace: Path, base_url: str, *, idle_s: float = 60.0) -> Config:
    return Config.model_validate({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                "maxConcurrentSessions": 20}},
        "providers": {"openai": {"apiKey": "sk-bench", "apiBase": base_url}},
        "gateway": {"workerIdleS": idle_s},
    })


async def _probe(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        samples.append(max(0.0, time.perf_counter() - t - PROBE_S))


class BusySteps:
    """Times every callback the loop runs, in thread CPU time (keeps the slowest few by name)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.worst: list[tuple[float, str]] = []
        self.gc_pauses: list[float] = []  # full collections (generation 2), wall time
        self._gc_started = 0.0
        self._original = asyncio.events.Handle._run

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses.append(time.perf_counter() - self._gc_started)

    def __enter__(self) -> BusySteps:
        original, samples, worst = self._original, self.samples, self.worst

        def timed(handle: asyncio.events.Handle) -> None:
            started = time.thread_time()
            try:
                original(handle)
            finally:
                spent = time.thread_time() - started
                samples.append(spent)
                if spent > 0.02:
                    worst.append((spent, _describe(handle)))

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        gc.callbacks.append(self._gc)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._original  # type: ignore[method-assign]
        gc.callbacks.remove(self._gc)


def _describe(handle: asyncio.events.Handle) -> str:
    """The task a slow step belonged to and where it paused next (the step ran up to there)."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if not isinstance(task, asyncio.Task):
        return repr(handle)[:160]
    frames = task.get_stack()
    where = ", ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in frames[-3:]) if frames else "done"
    return f"task {task.get_name()} ({getattr(task.get_coro(), '__qualname__', '?')}) paused at {where}"


def _report(name: str, stalls: list[float], busy: BusySteps, extra: str = "") -> None:
    over = sum(1 for s in stalls if s > 0.05)
    print(f"{name:<34} probe stall p50 {pct(stalls, 50) * 1000:5.1f}  p99 {pct(stalls, 99) * 1000:5.1f}  "
          f"max {max(stalls, default=0) * 1000:6.1f} ms  (> 50 ms: {over} of {len(stalls)}){extra}", flush=True)
    print(f"{'':<34} busy step  p50 {pct(busy.samples, 50) * 1000:5.1f}  "
          f"p99 {pct(busy.samples, 99) * 1000:5.1f}  max {max(busy.samples, default=0) * 1000:6.1f} ms "
          f"CPU ({len(busy.samples):,} steps); full GCs {len(busy.gc_pauses)}, "
          f"longest {max(busy.gc_pauses, default=0) * 1000:.1f} ms", flush=True)
    for spent, what in sorted(busy.worst, reverse=True)[:3]:
        print(f"{'':<36}{spent * 1000:6.1f} ms  {what}")


async def _gateway(tmp: str, llm: ExternalFakeLLM, **config: Any) -> tuple[Any, FakeChannel]:
    from lucidgate.gateway.app import build_gateway

    gw = build_gateway(make_config(Path(tmp), llm.base_url, **config))
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    return gw, channel


async def sessions_run(llm: ExternalFakeLLM, per_session: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gw, channel = await _gateway(tmp, llm)
        async with gw:
            await channel.say("warm up", chat_id="warm", sender_id="local")  # first call imports
            await channel.wait_replies(1, timeout=120)
            stalls: list[float] = []
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(stalls, stop))
            started = time.perf_counter()
            with BusySteps() as busy:
                for i in range(per_session):  # 20 messages in flight, one per session, per round
                    for n in range(20):
                        await channel.say(TEXT.format(i=i), chat_id=f"s{n}", sender_id="local")
                    await channel.wait_replies(1 + 20 * (i + 1), timeout=300)
            wall = time.perf_counter() - started
            stop.set()
            await probe
        _report(f"20 sessions x {per_session} turns", stalls, busy, f"  {20 * per_session / wall:.1f} msg/s")


async def long_run(llm: ExternalFakeLLM, turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gw, channel = await _gateway(tmp, llm)
        async with gw:
            await channel.say("warm up", chat_id="warm", sender_id="local")  # litellm's first call
            await channel.wait_replies(1, timeout=120)
            stalls: list[float] = []
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(stalls, stop))
            with BusySteps() as busy:
                for turn in range(1, turns + 1):
                    await channel.say(TEXT.format(i=turn), sender_id="local")
                    await channel.wait_replies(turn + 1, timeout=120)
                    if turn % 250 == 0:
                        print(f"  … turn {turn}", file=sys.stderr, flush=True)
            stop.set()
            await probe
        _report(f"one session, {turns} turns", stalls, busy)


def _gauges(gw: Any) -> str:
    text = gw.parts.metrics.render().decode()
    found = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
             if line.split(" ")[0] in ("lucid_session_workers", "lucid_delivery_lanes")}
    return f"workers {found['lucid_session_workers']:.0f}, lanes {found['lucid_delivery_lanes']:.0f}"


async def burst_run(llm: ExternalFakeLLM, chats: int, idle_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gw, channel = await _gateway(tmp, llm, idle_s=idle_s)
        async with gw:
            before = _gauges(gw)
            stalls: list[float] = []
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(stalls, stop))
            started = time.perf_counter()
            with BusySteps() as busy:
                for n in range(chats):
                    await channel.say("/help", chat_id=f"burst-{n}", sender_id="u")
                await channel.wait_replies(chats, timeout=600)
                sent = time.perf_counter() - started
                peak = _gauges(gw)
                await asyncio.sleep(idle_s + 1.0)  # the idle period itself is what is measured
                after = _gauges(gw)
            stop.set()
            await probe
        print(f"burst of {chats} chats ({chats / sent:.0f} msg/s): before {before}; "
              f"when answered {peak}; after {idle_s:g} s idle {after}")
        _report("  the burst and the idle after it", stalls, busy)


async def run(args: argparse.Namespace) -> None:
    llm = ExternalFakeLLM(short=True)
    try:
        if args.only in (None, "sessions"):
            await sessions_run(llm, args.per_session)
        if args.only in (None, "long"):
            await long_run(llm, args.turns)
        if args.only in (None, "burst"):
            await burst_run(llm, args.chats, args.idle_s)
    finally:
        llm.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("sessions", "long", "burst"))
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--chats", type=int, default=5000)
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
