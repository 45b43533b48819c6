"""Memory benchmark: one session of many turns against a zero-latency fake LLM.

Reports per-turn wall time around turns 10, 1,000 and 5,000 (median of a window), the
prompt tokens the model was sent, how often consolidation ran, and the sizes of
history.jsonl and the session file. Per-turn cost must stay flat and prompts under budget.
Run: ``.venv/bin/python bench/bench_memory.py [--turns 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lucidgate.memory.tokens import bundled_tokenizer_dir  # noqa: E402  (what `lucid` sets at start)

os.environ.setdefault("TIKTOKEN_CACHE_DIR", bundled_tokenizer_dir() or "")

from lucidgate.config.schema import Config  # noqa: E402
from tests.fakes.channel import FakeChannel  # noqa: E402
from tests.fakes.llm import FakeLLMServer, Func, Reply  # noqa: E402

CONTEXT_WINDOW = 8192
MAX_COMPLETION = 1024


def summarise_or_answer(request: dict) -> Reply:
    system = request["messages"][0]["content"] if request["messages"] else ""
    if "tools" not in request and "summar" in system.lower():
        return Reply("- the user sent a numbered message in this stretch of the chat")
    return Reply("Noted. " + "This is a moderately long answer to keep the transcript growing. " * 3)


async def run(turns: int) -> None:
    from lucidgate.gateway.app import build_gateway
    from lucidgate.memory import tokens

    llm = FakeLLMServer().start_in_thread()
    llm.default = lambda request: Func(summarise_or_answer)  # type: ignore[assignment]
    marks = sorted({10, min(1000, turns), turns})
    window = 25  # a window spans a consolidation or two: the median is the steady cost
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        config = Config.model_validate({
            "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                    "contextWindowTokens": CONTEXT_WINDOW,
                                    "maxCompletionTokens": MAX_COMPLETION}},
            "providers": {"openai": {"apiKey": "sk-bench", "apiBase": llm.base_url}},
        })
        budget = config.agent.prompt_budget
        gw = build_gateway(config)
        channel = FakeChannel(gw.parts.bus, name="cli")
        gw.add_channel("cli", channel)
        times: dict[int, float] = {}
        max_prompt = 0
        prompt_at: dict[int, int] = {}
        async with gw:
            for turn in range(1, turns + 1):
                before = len(llm.requests)
                started = time.perf_counter()
                await channel.say(f"message number {turn}: please remember it", sender_id="local")
                await channel.wait_replies(turn, timeout=120)
                times[turn] = time.perf_counter() - started
                for req in llm.requests[before:]:
                    if req.get("tools"):
                        size = tokens.count_messages(req["messages"]) + tokens.count_tools(req["tools"])
                        max_prompt = max(max_prompt, size)
                        prompt_at[turn] = size
                if turn % 500 == 0:
                    print(f"  … turn {turn}", file=sys.stderr, flush=True)
            await gw.parts.consolidator.drain()
            history = workspace / "memory" / "history.jsonl"
            session_file = workspace / "sessions" / "cli_1.jsonl"
            history_lines = history.read_text().count("\n") if history.exists() else 0
            print(f"turns: {turns}, prompt budget {budget} tokens (window {CONTEXT_WINDOW})")
            for mark in marks:
                lo, hi = max(1, mark - window), min(turns, mark + window)
                ms = statistics.median(times[t] for t in range(lo, hi + 1)) * 1000
                print(f"turn {mark:>5}: {ms:7.1f} ms wall (median of turns {lo}-{hi}), "
                      f"prompt {prompt_at.get(mark, 0):,} tokens")
            print(f"max prompt tokens sent: {max_prompt:,} (budget {budget:,})")
            print(f"history.jsonl: {history_lines} entries, {history.stat().st_size / 1024:.0f} KiB")
            print(f"session file: {session_file.stat().st_size / 1024:.0f} KiB")
    llm.stop_thread()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=5000)
    args = parser.parse_args()
    asyncio.run(run(args.turns))


if __name__ == "__main__":
    main()
