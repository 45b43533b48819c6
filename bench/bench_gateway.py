"""Daemon benchmark: ``lucid gateway`` in its own process, driven over HTTP.

Measures, against the fake OpenAI server (itself in another process, so neither its CPU
nor the clients' counts as the gateway's):

* gateway overhead per message — POST /v1/messages with wait=true, fake LLM at 0 ms:
  p50/p95/p99 over 2,000 requests from 20 concurrent clients (a fresh session each, so a
  growing transcript does not blur the per-message cost), and the same from one client;
* throughput with the fake LLM at 200 ms, across 1, 10 and 50 sessions;
* a ``/help`` round trip (HTTP, auth, bus, agent; no model call);
* idle RSS right after start, RSS after the first turns (litellm loaded), peak RSS.

Run: ``.venv/bin/python bench/bench_gateway.py`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def proc_status(pid: int, field: str) -> float:
    """A ``/proc/<pid>/status`` memory field (VmRSS, VmHWM) in MiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


class FakeLLMProcess:
    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_fake_llm_server.py"), str(latency)],
                                     stdout=subprocess.PIPE, text=True)
        self.base_url = self.proc.stdout.readline().strip()  # type: ignore[union-attr]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class PlatformStandIns:
    """The loopback Telegram Bot API and Slack stand-ins of the test suite, on a thread of
    their own, so the gateway runs its real Telegram poller and Slack socket while measured."""

    def __init__(self) -> None:
        sys.path.insert(0, str(ROOT))
        from tests.fakes.slack_api import FakeSlackAPI
        from tests.fakes.telegram_api import FakeTelegramAPI

        self.telegram, self.slack = FakeTelegramAPI(), FakeSlackAPI()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._stop = asyncio.Event()

        async def serve() -> None:
            async with self.telegram, self.slack:
                ready.set()
                await self._stop.wait()

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(serve(),), daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise RuntimeError("the Telegram/Slack stand-ins did not start")

    def channels(self) -> dict[str, Any]:
        return {"telegram": {"enabled": True, "token": self.telegram.token, "apiBase": self.telegram.base_url,
                             "allowFrom": ["42"]},
                "slack": {"enabled": True, "botToken": self.slack.bot_token, "appToken": self.slack.app_token,
                          "apiBase": self.slack.base_url, "mode": "socket", "allowFrom": ["U_ALICE"]}}

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(30)


class GatewayProcess:
    def __init__(self, workdir: Path, llm_url: str, max_sessions: int,
                 extra_channels: dict[str, Any] | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "config.json"
        config.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(workdir / "workspace"), "model": "openai/fake-model",
                                    "maxConcurrentSessions": max_sessions}},
            "providers": {"openai": {"apiKey": "sk-bench", "apiBase": llm_url}},
            "channels": {"webhook": {"token": TOKEN, "callbackSecret": "bench-secret-0123456789",
                                     "rateLimitPerMin": 10_000_000,
                                     "rateLimitPerCredentialPerMin": 10_000_000,
                                     "rateLimitGlobalPerMin": 10_000_000, "waitTimeoutS": 300},
                         **(extra_channels or {})},
            "gateway": {"port": 0, "shutdownGraceS": 10},
            "usage": {"guestDailyTokenBudget": None},  # measure throughput, not the guest budget
        }))
        env = {**os.environ, "HOME": str(workdir), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "gateway", "--config", str(config),
             "--no-access-log"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        self.url = ""
        for line in self.proc.stdout:  # type: ignore[union-attr]
            match = re.search(r"webhook: POST (http://\S+)/v1/messages", line)
            if match:
                self.url = match.group(1)
                break
        if not self.url:
            raise RuntimeError("the gateway did not start")
        self.start_s = time.perf_counter() - started
        self.idle_rss = proc_status(self.proc.pid, "VmRSS")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


async def post(client: httpx.AsyncClient, chat: str, text: str) -> float:
    started = time.perf_counter()
    r = await client.post("/v1/messages", json={"chat_id": chat, "sender_id": chat, "text": text})
    if r.status_code != 200 or r.json().get("error"):
        raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
    return time.perf_counter() - started


async def overhead(url: str, total: int, clients: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    per_client = total // clients
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120, limits=limits) as client:
        await asyncio.gather(*[post(client, f"warm{i}", "warm up") for i in range(clients)])

        # A fresh session per request: what is measured is the cost of a message, not of
        # a transcript that grows by 200 lines (the prompt re-sends its whole history).
        async def run(i: int) -> None:
            for n in range(per_client):
                latencies.append(await post(client, f"c{clients}-{i}-{n}", f"message {n}"))

        started = time.perf_counter()
        await asyncio.gather(*[run(i) for i in range(clients)])
        return latencies, time.perf_counter() - started


async def commands(url: str, count: int) -> list[float]:
    """HTTP + auth + bus + the agent's command path, without a model call."""
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as client:
        return [await post(client, "cmd", "/help") for _ in range(count)]


async def throughput(url: str, sessions: int, per_session: int) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions * 2)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=300, limits=limits) as client:
        async def run(i: int) -> None:
            for n in range(per_session):
                await post(client, f"t{sessions}-{i}", f"message {n}")

        started = time.perf_counter()
        await asyncio.gather(*[run(i) for i in range(sessions)])
        elapsed = time.perf_counter() - started
    return sessions * per_session / elapsed, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (300 requests, fewer turns)")
    parser.add_argument("--max-sessions", type=int, default=16, help="agents.defaults.maxConcurrentSessions")
    parser.add_argument("--all-channels", action="store_true",
                        help="Telegram (long polling) and Slack (Socket Mode) on too, against loopback stand-ins")
    args = parser.parse_args()
    standins = PlatformStandIns() if args.all_channels else None
    extra = standins.channels() if standins is not None else None
    total, clients = (300, 20) if args.quick else (2000, 20)
    rows: list[tuple[str, str]] = []

    with tempfile.TemporaryDirectory(prefix="lucid-bench-") as tmp:
        llm = FakeLLMProcess(0.0)
        try:
            gateway = GatewayProcess(Path(tmp) / "a", llm.base_url, args.max_sessions, extra)
        except BaseException:
            llm.stop()
            raise
        try:
            rows.append(("start-up to listening (s)", f"{gateway.start_s:.2f}"))
            rows.append(("idle RSS after start (MiB)", f"{gateway.idle_rss:.0f}"))
            asyncio.run(throughput(gateway.url, 1, 2))  # warm-up: litellm loaded, first turns done
            help_ms = [x * 1000 for x in asyncio.run(commands(gateway.url, total // 10))]
            rows.append(("/help round trip p50 / p95 (ms), no LLM call", f"{pct(help_ms, 50):.1f} / "
                                                                      f"{pct(help_ms, 95):.1f}"))
            alone, _ = asyncio.run(overhead(gateway.url, total // 10, 1))
            ms = [x * 1000 for x in alone]
            rows.append(("latency p50 / p95 (ms), 1 client, LLM 0 ms",
                         f"{pct(ms, 50):.1f} / {pct(ms, 95):.1f}"))
            latencies, elapsed = asyncio.run(overhead(gateway.url, total, clients))
            ms = [x * 1000 for x in latencies]
            rows.append((f"overhead p50 / p95 / p99 (ms), {len(ms)} req, {clients} clients, LLM 0 ms",
                         f"{pct(ms, 50):.1f} / {pct(ms, 95):.1f} / {pct(ms, 99):.1f}"))
            rows.append(("  messages/s at LLM 0 ms", f"{len(ms) / elapsed:.0f}"))
            rows.append(("RSS after the load (MiB)", f"{proc_status(gateway.pid, 'VmRSS'):.0f}"))
            peak = proc_status(gateway.pid, "VmHWM")
        finally:
            code = gateway.stop()
            llm.stop()
        rows.append(("exit code after SIGTERM", str(code)))

        llm = FakeLLMProcess(0.2)
        try:
            gateway = GatewayProcess(Path(tmp) / "b", llm.base_url, args.max_sessions, extra)
        except BaseException:
            llm.stop()
            raise
        try:
            asyncio.run(throughput(gateway.url, 1, 2))  # warm-up: litellm import
            for sessions, per_session in ((1, 10 if args.quick else 25), (10, 5 if args.quick else 15),
                                          (50, 3 if args.quick else 8)):
                rate, elapsed = asyncio.run(throughput(gateway.url, sessions, per_session))
                ideal = min(sessions, args.max_sessions) / 0.2
                rows.append((f"throughput, LLM 200 ms, {sessions} session(s) (msg/s; ideal {ideal:.0f})",
                             f"{rate:.1f} ({sessions * per_session} msgs in {elapsed:.1f}s)"))
            peak = max(peak, proc_status(gateway.pid, "VmHWM"))
        finally:
            gateway.stop()
            llm.stop()
        rows.append(("peak RSS (MiB)", f"{peak:.0f}"))

    if standins is not None:
        standins.stop()
    width = max(len(name) for name, _ in rows)
    channels = "webhook + Telegram + Slack" if standins is not None else "webhook"
    print(f"lucid gateway benchmark ({'quick' if args.quick else 'full'}; {channels}; maxConcurrentSessions "
          f"{args.max_sessions}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f})")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()
