"""Foundation benchmark: the agent loop against a zero-latency fake LLM.

Prints messages/s, turn latency p50/p95, CPU ms per message, event-loop lag p99, the
prompt tokens of the first "hello" in a fresh session (all built-in tools on), the cold
start of ``lucid agent -m hi`` and peak RSS. Run: ``.venv/bin/python bench/bench_agent.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lucidgate.memory.tokens import bundled_tokenizer_dir  # noqa: E402  (what `lucid` sets at start)

os.environ.setdefault("TIKTOKEN_CACHE_DIR", bundled_tokenizer_dir() or "")

from lucidgate.channels.messages import InboundMessage  # noqa: E402
from lucidgate.config.schema import Config  # noqa: E402
from tests.fakes.channel import FakeChannel  # noqa: E402
from tests.fakes.llm import FakeLLMServer  # noqa: E402


def make_config(workspace: Path, base_url: str) -> Config:
    return Config.model_validate({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                "maxConcurrentSessions": 20}},
        "providers": {"openai": {"apiKey": "sk-bench", "apiBase": base_url}},
    })


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def loop_lag_probe(samples: list[float], stop: asyncio.Event, interval: float = 0.01) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(interval)
        samples.append(max(0.0, time.perf_counter() - t - interval))


class ExternalFakeLLM:
    """The fake server in a child process: its CPU does not count as ours."""

    def __init__(self, latency: float = 0.0, *, short: bool = False) -> None:
        script = Path(__file__).with_name("_fake_llm_server.py")
        self.proc = subprocess.Popen([sys.executable, str(script), str(latency)] + (["short"] if short else []),
                                     stdout=subprocess.PIPE, text=True)
        self.base_url = self.proc.stdout.readline().strip()  # type: ignore[union-attr]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def first_hello_tokens() -> int:
    """Prompt tokens (messages + tool schemas) of "hello" in a fresh session, owner, all tools."""
    from lucidgate.gateway.app import build_gateway
    from lucidgate.memory import tokens

    llm = FakeLLMServer().start_in_thread()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            gw = build_gateway(make_config(Path(tmp), llm.base_url))
            channel = FakeChannel(gw.parts.bus, name="cli")
            gw.add_channel("cli", channel)
            async with gw:
                await channel.say("hello", sender_id="local")
                await channel.wait_replies(1, timeout=60)
            first = llm.requests[0]
            return tokens.count_messages(first["messages"]) + tokens.count_tools(first.get("tools"))
    finally:
        llm.stop_thread()


async def throughput(messages: int, sessions: int) -> dict[str, float]:
    from lucidgate.gateway.app import build_gateway

    hello_tokens = await first_hello_tokens()
    llm = ExternalFakeLLM()
    with tempfile.TemporaryDirectory() as tmp:
        gw = build_gateway(make_config(Path(tmp), llm.base_url))
        channel = FakeChannel(gw.parts.bus, name="cli")
        gw.add_channel("cli", channel)
        async with gw:
            # warm-up: imports litellm and opens the HTTP pool
            await channel.say("hello", chat_id="warm", sender_id="local")
            await channel.wait_replies(1, timeout=60)
            sent_at: dict[str, float] = {}
            latencies: list[float] = []
            original_send = channel.send

            async def timed_send(msg):  # type: ignore[no-untyped-def]
                if msg.kind in ("text", "error") and msg.in_reply_to in sent_at:
                    latencies.append(time.perf_counter() - sent_at.pop(msg.in_reply_to))
                await original_send(msg)

            gw.parts.bus.subscribe("cli", timed_send)
            lag: list[float] = []
            stop = asyncio.Event()
            probe = asyncio.create_task(loop_lag_probe(lag, stop))
            cpu0, t0 = time.process_time(), time.perf_counter()
            for i in range(messages):
                mid = f"b{i}"
                sent_at[mid] = time.perf_counter()
                await gw.parts.bus.publish_inbound(InboundMessage(
                    channel="cli", chat_id=f"s{i % sessions}", sender_id="local", text=f"message {i}",
                    message_id=mid, role="owner"))
            await channel.wait_replies(messages + 1, timeout=600)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            stop.set()
            await probe
    llm.stop()
    return {
        "messages": messages, "sessions": sessions, "msg_per_s": messages / wall,
        "turn_p50_ms": pct(latencies, 50) * 1000, "turn_p95_ms": pct(latencies, 95) * 1000,
        "cpu_ms_per_msg": cpu / messages * 1000,
        "loop_lag_p99_ms": pct(lag, 99) * 1000 if lag else 0.0,
        "first_hello_prompt_tokens": hello_tokens,
    }


def cold_start() -> float:
    llm = FakeLLMServer().start_in_thread()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(Path(tmp) / "ws"), "model": "openai/fake-model"}},
            "providers": {"openai": {"apiKey": "sk-bench", "apiBase": llm.base_url}},
        }))
        lucid = Path(sys.executable).with_name("lucid")
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            proc = subprocess.run([str(lucid), "agent", "-m", "hi", "--config", str(cfg)],
                                  capture_output=True, text=True, timeout=120)
            runs.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise SystemExit(f"lucid agent failed: {proc.stderr}")
    llm.stop_thread()
    return statistics.median(runs)


def import_profile() -> dict[str, object]:
    """What a one-shot ``lucid agent -m hi`` imports (``python -X importtime``): the module
    count, the heaviest top-level imports and whether the web stack or a chat SDK came along."""
    llm = FakeLLMServer().start_in_thread()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "config.json"
            cfg.write_text(json.dumps({
                "agents": {"defaults": {"workspace": str(Path(tmp) / "ws"), "model": "openai/fake-model"}},
                "providers": {"openai": {"apiKey": "sk-bench", "apiBase": llm.base_url}},
            }))
            env = {**os.environ, "HOME": tmp, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            proc = subprocess.run([sys.executable, "-X", "importtime", "-c",
                                   "from lucidgate.gateway.cli import main; main()", "agent", "-m", "hi", "--config", str(cfg)],
                                  capture_output=True, text=True, timeout=180, env=env)
    finally:
        llm.stop_thread()
    rows = [line.split("|") for line in proc.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    timed = [(int(r[1]), r[2].rstrip()) for r in rows[1:] if r[1].strip().isdigit()]
    top_level = [(us, name.strip()) for us, name in timed if not name.startswith("  ")]
    packages = sorted({name.strip().split(".")[0] for _, name in timed})
    heavy = sorted(top_level, reverse=True)[:8]
    watched = ["fastapi", "starlette", "uvicorn", "telegram", "slack_bolt", "slack_sdk", "git", "apscheduler",
               "numpy", "watchfiles", "litellm", "tiktoken"]
    return {
        "modules_imported": len(timed),
        "heaviest_imports": ", ".join(f"{name} {us / 1000:.0f} ms" for us, name in heavy),
        "loaded_of_watched": ", ".join(p for p in watched if p in packages),
        "not_loaded_of_watched": ", ".join(p for p in watched if p not in packages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(throughput(args.messages, args.sessions))
    result["cold_start_agent_m_s"] = cold_start()
    result.update(import_profile())
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value:,.2f}" if isinstance(value, float) else f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
