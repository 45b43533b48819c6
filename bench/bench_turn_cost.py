"""What a turn costs over a long session at default settings, the recall index included.

One session of ``--turns`` turns (1,000) through the in-process gateway, against the fake
LLM in its own process (its CPU is not ours). Prints latency and prompt tokens at turns
10 / 250 / 500 / 1,000, the event-loop stall, and CPU per message two ways:

- *during the turns*: what this process used while they ran;
- *index caught up*: the same, plus what the recall index still had to embed after the last
  turn. A chat as fast as this one (a 0 ms model) outruns the embedder, which runs at low
  priority beside the turns; without this second figure recall looks cheaper than it is.

Not a test: it prints numbers. ``--keyword-only`` measures recall without vectors.
Run: ``.venv/bin/python bench/bench_turn_cost.py [--turns 1000] [--keyword-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_agent import ExternalFakeLLM, loop_lag_probe, pct  # noqa: E402
from lucidgate.config.schema import Config  # noqa: E402
from tests.fakes.channel import FakeChannel  # noqa: E402

TEXT = "message {i} of a long chat: the quick brown fox jumps over the lazy dog"


def make_config(workspace: Path, base_url: str, *, keyword_only: bool) -> Config:
    defaults: dict = {"workspace": str(workspace), "model": "openai/fake-model"}
    if keyword_only:
        defaults["memory"] = {"search": {"embedding": {"model": "none"}}}
    return Config.model_validate({"agents": {"defaults": defaults},
                                  "providers": {"openai": {"apiKey": "sk-bench", "apiBase": base_url}}})


def prompt_tokens(workspace: Path) -> list[int]:
    """Prompt tokens of each turn's model calls, in order, from the usage ledger."""
    calls = []
    for path in sorted((workspace / "usage").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("job") == "turn":
                calls.append(int(row["prompt"]))
    return calls


async def run(turns: int, keyword_only: bool) -> None:
    from lucidgate.gateway.app import build_gateway

    llm = ExternalFakeLLM(short=True)  # short replies, as a chat model gives
    marks = [m for m in (10, 250, 500, 1000) if m <= turns] or [turns]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workspace = Path(tmp)
            gw = build_gateway(make_config(workspace, llm.base_url, keyword_only=keyword_only))
            channel = FakeChannel(gw.parts.bus, name="cli")
            gw.add_channel("cli", channel)
            lags: list[float] = []
            stop = asyncio.Event()
            async with gw:
                probe = asyncio.create_task(loop_lag_probe(lags, stop))
                latency: dict[int, float] = {}
                cpu0 = time.process_time()
                for turn in range(1, turns + 1):
                    started = time.perf_counter()
                    await channel.say(TEXT.format(i=turn), sender_id="local")
                    await channel.wait_replies(turn, timeout=120)
                    latency[turn] = (time.perf_counter() - started) * 1000
                    if turn % 250 == 0:
                        print(f"  … turn {turn}", file=sys.stderr, flush=True)
                cpu_turns = time.process_time() - cpu0
                stop.set()
                await probe
                backlog = 0
                recall = gw.parts.recall
                if recall is not None:  # index and embed what the background had not reached yet
                    await recall.stop()  # (alone: two embedders at once would do it twice)
                    recall.index.cancel.clear()
                    await asyncio.to_thread(recall.index.sync_files)
                    backlog = await asyncio.to_thread(recall.index.embed_missing)
                cpu_all = time.process_time() - cpu0
                status = await recall.status() if recall is not None else {}
            prompts = prompt_tokens(workspace)
        print(f"{turns} turns, recall {'keyword-only' if keyword_only else 'with vectors (default)'}")
        for mark in marks:
            print(f"turn {mark:>5}: latency {latency[mark]:6.1f} ms, "
                  f"prompt {prompts[mark - 1] if mark <= len(prompts) else 0:,} tokens")
        print(f"CPU per message, during the turns:   {cpu_turns * 1000 / turns:6.1f} ms")
        print(f"CPU per message, index caught up:    {cpu_all * 1000 / turns:6.1f} ms "
              f"({backlog} texts were still waiting for the embedder)")
        print(f"event-loop stall p99 / max:          {pct(lags, 99) * 1000:.1f} / "
              f"{max(lags, default=0) * 1000:.1f} ms")
        if status:
            print(f"index: {status['chunks']} chunks, {status['embedded']} embedded, "
                  f"embedder {status['embedder']}")
    finally:
        llm.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--keyword-only", action="store_true",
                        help="recall without vectors (memory.search.embedding.model: none)")
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.keyword_only))


if __name__ == "__main__":
    main()
