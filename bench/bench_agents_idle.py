"""What an idle agent costs: ``lucid gateway`` with 1 agent, then with 10, each left alone.

Issue 41 asks that several agents cost no more than one while nobody talks to them ("one
process, one model client, one embedder shared by all agents; an idle agent costs no tokens
and no work": RSS and CPU within a few percent). This starts the real daemon in its own
process twice, with a temporary config and workspaces (the webhook on, the fake OpenAI
server on loopback in a process of its own, every other setting at its default: the bundled
embedder, the recall index with its file watcher, Dream's schedule, the heartbeat):

1. one agent (no ``agents.list``: today's daemon), then
2. ``--agents`` agents (default 10) in ``agents.list``, each with its own workspace.

Each daemon is left to settle after it reports ready (templates written, each recall index's
first sync), at least ``--settle`` seconds and until a 5-second window shows under 1 % of a
core. Then it idles for ``--seconds`` (default 60): no message is sent. Measured from
``/proc/<pid>``: RSS at the end, CPU time (user + system, all threads) over the idle
period, and the thread count. Printed for both, with the ratio. The fake model's request
count shows that idle agents spent no tokens.

Run: ``nice -n 10 .venv/bin/python bench/bench_agents_idle.py [--seconds 60] [--agents 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fake_llm_process import FakeModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "idle-token-0123456789abcdef"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of every thread of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def status(pid: int, key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(match.group(1)) if match else -1


def model_requests(base: str) -> int:
    with urllib.request.urlopen(base.removesuffix("/v1") + "/stats", timeout=10) as response:  # loopback only
        return int(json.load(response).get("requests", -1))


@dataclass(slots=True)
class Idle:
    agents: int
    rss_mib: float
    cpu_s: float
    seconds: float
    threads: int
    settle_s: float
    model_calls: int

    @property
    def cpu_pct(self) -> float:
        return 100 * self.cpu_s / self.seconds


def write_config(workdir: Path, agents: int, llm_url: str) -> Path:
    document: dict[str, object] = {
        "agents": {"defaults": {"workspace": str(workdir / "agent0"), "model": "openai/fake-model"}},
        "providers": {"openai": {"apiKey": "sk-idle", "apiBase": llm_url}},
        "channels": {"webhook": {"token": TOKEN}},
        "gateway": {"port": 0, "shutdownGraceS": 10},
    }
    if agents > 1:
        document["agents"]["list"] = [{"id": f"agent{i}", "workspace": str(workdir / f"agent{i}")}  # type: ignore[index]
                                      for i in range(agents)]
    path = workdir / "config.json"
    path.write_text(json.dumps(document))
    return path


class Daemon:
    """``lucid gateway`` with ``config``; its output goes to ``workdir/gateway.log``."""

    def __init__(self, workdir: Path, config: Path) -> None:
        env = {**os.environ, "HOME": str(workdir), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
        self.log = (workdir / "gateway.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-c", "from lucidgate.gateway.cli import main; main()",
                                      "gateway", "--config", str(config), "--no-access-log"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=ROOT)
        url = ""
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.log.write(line)
            if match := re.search(r"webhook: POST (http://\S+)/v1/messages", line):
                url = match.group(1)
                break
        if not url:
            raise RuntimeError(f"the gateway did not start; see {workdir / 'gateway.log'}")
        self.url = url
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.log.write(line)

    def ready(self, deadline_s: float = 300.0) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=5) as response:  # loopback only
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError("the gateway never became ready")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        finally:
            self.log.close()


def settle(pid: int, at_least_s: float, *, window_s: float = 5.0, quiet_pct: float = 1.0,
           most_s: float = 240.0) -> float:
    """Wait until the daemon's start-up work is done: ``at_least_s``, then until a window of
    ``window_s`` uses under ``quiet_pct`` % of a core (or ``most_s`` in all). Seconds waited."""
    started = time.monotonic()
    time.sleep(at_least_s)
    while time.monotonic() - started < most_s:
        before = cpu_s(pid)
        time.sleep(window_s)
        if 100 * (cpu_s(pid) - before) / window_s < quiet_pct:
            break
    return time.monotonic() - started


def measure(agents: int, seconds: float, settle_s: float, model: FakeModel) -> Idle:
    with tempfile.TemporaryDirectory(prefix=f"lucid-idle-{agents}-") as tmp:
        workdir = Path(tmp)
        daemon = Daemon(workdir, write_config(workdir, agents, model.base_url))
        try:
            daemon.ready()
            waited = settle(daemon.proc.pid, settle_s)
            calls = model_requests(model.base_url)
            cpu0, t0 = cpu_s(daemon.proc.pid), time.monotonic()
            time.sleep(seconds)
            cpu1, t1 = cpu_s(daemon.proc.pid), time.monotonic()
            pid = daemon.proc.pid
            return Idle(agents, status(pid, "VmRSS") / 1024, cpu1 - cpu0, t1 - t0, status(pid, "Threads"),
                        waited, model_requests(model.base_url) - calls)
        finally:
            code = daemon.stop()
            if code != 0:
                print(f"warning: the {agents}-agent gateway exited {code}; see its log", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long each daemon idles (measured)")
    parser.add_argument("--agents", type=int, default=10, help="the agents of the second daemon")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after ready before measuring, at least")
    args = parser.parse_args()
    model = FakeModel("short")
    try:
        runs = [measure(n, args.seconds, args.settle, model) for n in (1, args.agents)]
    finally:
        model.stop()
    load = os.getloadavg()
    print(f"idle {args.seconds:.0f} s each, after settling; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'agents':>6} {'RSS MiB':>9} {'CPU s':>7} {'CPU %':>7} {'threads':>8} {'settle s':>9} {'model calls':>12}")
    for r in runs:
        print(f"{r.agents:>6} {r.rss_mib:>9.1f} {r.cpu_s:>7.2f} {r.cpu_pct:>7.2f} {r.threads:>8} "
              f"{r.settle_s:>9.0f} {r.model_calls:>12}")
    one, many = runs
    print(f"ratio {many.agents}/1: RSS {many.rss_mib / one.rss_mib:.3f}, "
          f"CPU {many.cpu_s / one.cpu_s if one.cpu_s else float('inf'):.2f} "
          f"({many.cpu_s - one.cpu_s:+.2f} s over {args.seconds:.0f} s)")


if __name__ == "__main__":
    main()
