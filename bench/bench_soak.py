"""Soak: does the daemon's memory level off, and does its speed hold, over a long run?

``lucid gateway`` runs in its own process (a temporary workspace and config) against the fake
OpenAI server at 0 ms (bench/_fake_llm_server.py ``soak``: short answers, one-bullet
summaries for the consolidator, ``NO_REPLY`` for the memory flush). Clients post ``--messages``
messages over the webhook channel (wait for the answer) to ``--chats`` chats, round-robin or
seeded-random, ``--concurrency`` at a time. The working set is small (``--working-set``
tokens), so every chat consolidates many times over the run, as a long-lived chat would.

Every ``--sample-every`` messages the daemon's RSS (``/proc/<pid>/status`` VmRSS) and the
throughput since the previous sample are recorded. At the end: a table, the RSS growth over
the last 20,000 messages (the last half for a shorter run) and the samples as CSV and JSON
under ``--out``. Memory that plateaus grows with sessions (caches up to their bound), not
with messages; the issue's bar is at most 5 % over the last 20,000.

``--census`` makes the daemon count its objects at every sample — by type, and dicts by their
keys — into ``--out``/census.txt: what grew between two censuses is what to look at. (Each
census stops the daemon for a moment; the figures of such a run are for diagnosis.)

Run: ``nice -n 10 .venv/bin/python bench/bench_soak.py`` (~30 min on 2 cores), or e.g.
``--messages 10000`` for a shorter look.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fake_llm_process import FakeModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "soak-token-0123456789abcdef"
OWNER_TOKEN = "soak-owner-token-0123456789abcdef"
WORDS = ("garden", "invoice", "Lisbon", "dentist", "sprint", "birthday", "router", "novel", "tax",
         "violin", "kayak", "ferment", "Kyoto", "deadline", "sourdough", "pension", "chess", "roof")

# Run inside the daemon's process with --census: on SIGUSR2, append to the file LUCID_SOAK_CENSUS
# names the most numerous object types, and dicts by their keys (a transcript message, a history
# entry, a request...), so two censuses say what grew between them. Cheap next to tracemalloc,
# which slows a loaded daemon down tenfold.
CENSUS_BOOT = """
import collections, gc, os, signal
def _census(signum, frame):
    path = os.environ["LUCID_SOAK_CENSUS"]
    objects = gc.get_objects()
    types = collections.Counter(type(o).__qualname__ for o in objects)
    shapes = collections.Counter(",".join(sorted(map(str, o))[:6]) for o in objects if type(o) is dict and o)
    with open(path, "a") as fh:
        fh.write(f"=== after {open(path + '.mark').read().strip()} messages: {len(objects)} objects\\n")
        for name, n in types.most_common(25):
            fh.write(f"{n:>10} {name}\\n")
        fh.write("--- dicts by keys\\n")
        for keys, n in shapes.most_common(15):
            fh.write(f"{n:>10} {{{keys}}}\\n")
    del objects
signal.signal(signal.SIGUSR2, _census)
"""


def rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def tree_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


@dataclass(slots=True)
class Sample:
    messages: int
    elapsed_s: float
    rss_mib: float
    msgs_per_s: float  # since the previous sample
    workspace_mib: float


class Daemon:
    """``lucid gateway`` with a config of its own; its log goes to ``workdir/gateway.log``."""

    def __init__(self, workdir: Path, llm_url: str, args: argparse.Namespace) -> None:
        self.workdir = workdir
        self.workspace = workdir / "workspace"
        config = workdir / "config.json"
        self.census_file = args.out.resolve() / "census.txt"
        owners = [f"u{i}" for i in range(args.chats)] if args.role == "owner" else []
        config.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(self.workspace), "model": "openai/fake-model",
                                    "maxConcurrentSessions": args.max_sessions,
                                    "workingSetTokens": args.working_set}},
            "providers": {"openai": {"apiKey": "sk-soak", "apiBase": llm_url}},
            "channels": {"webhook": {"token": TOKEN, "ownerToken": OWNER_TOKEN, "owners": owners,
                                     "callbackSecret": "soak-secret-0123456789",
                                     "rateLimitPerMin": 10_000_000, "rateLimitPerCredentialPerMin": 10_000_000,
                                     "rateLimitGlobalPerMin": 10_000_000, "waitTimeoutS": 300}},
            "gateway": {"port": 0, "shutdownGraceS": 10},
            "usage": {"guestDailyTokenBudget": None},  # measure the daemon, not the guest budget
        }))
        env = {**os.environ, "HOME": str(workdir), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1",
               "LUCID_SOAK_CENSUS": str(self.census_file)}
        boot = (CENSUS_BOOT if args.census else "") + "from lucidgate.gateway.cli import main; main()"
        self.log = (workdir / "gateway.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-c", boot, "gateway", "--config", str(config),
                                      "--no-access-log"], stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env, cwd=ROOT)
        self.url = ""
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.log.write(line)
            match = re.search(r"webhook: POST (http://\S+)/v1/messages", line)
            if match:
                self.url = match.group(1)
                break
        if not self.url:
            raise RuntimeError(f"the gateway did not start; see {workdir / 'gateway.log'}")
        # Keep reading stdout, so a chatty daemon never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.log.write(line)

    def census(self, mark: int) -> None:
        Path(f"{self.census_file}.mark").write_text(str(mark))
        self.proc.send_signal(signal.SIGUSR2)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        finally:
            self.log.close()


def message_text(n: int, chat: int, rng: random.Random) -> str:
    """A chat-like message of 80-250 characters that differs every time (no cache can fold them)."""
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 20)))
    return f"Message {n} in chat {chat}: please keep in mind the {words}; what should I do next?"


def chat_order(args: argparse.Namespace) -> list[int]:
    if args.order == "random":
        rng = random.Random(args.seed)
        return [rng.randrange(args.chats) for _ in range(args.messages)]
    return [n % args.chats for n in range(args.messages)]


async def drive(daemon: Daemon, args: argparse.Namespace) -> tuple[list[Sample], int]:
    """Post every message, ``args.concurrency`` in flight; one sample every ``sample_every``."""
    order = chat_order(args)
    rng = random.Random(args.seed + 1)
    texts = (message_text(n, chat, rng) for n, chat in enumerate(order))
    counter = itertools.count()
    samples: list[Sample] = []
    done = errors = 0
    started = last_t = time.perf_counter()
    headers = {"Authorization": f"Bearer {OWNER_TOKEN if args.role == 'owner' else TOKEN}"}
    limits = httpx.Limits(max_connections=args.concurrency * 2, max_keepalive_connections=args.concurrency * 2)

    def sample() -> None:
        nonlocal last_t
        now = time.perf_counter()
        window = done - (samples[-1].messages if samples else 0)
        samples.append(Sample(done, round(now - started, 1), round(rss_mib(daemon.proc.pid), 1),
                              round(window / max(now - last_t, 1e-9), 1), round(tree_mib(daemon.workspace), 1)))
        last_t = now
        (args.out / "partial.json").write_text(json.dumps([asdict(s) for s in samples]) + "\n")
        if args.census:
            daemon.census(done)

    def out_of_time() -> bool:
        return args.max_minutes is not None and time.perf_counter() - started > args.max_minutes * 60

    async with httpx.AsyncClient(base_url=daemon.url, headers=headers, timeout=600, limits=limits) as client:
        async def client_task() -> None:
            nonlocal done, errors
            while (n := next(counter)) < args.messages and not out_of_time():
                chat = order[n]
                r = await client.post("/v1/messages", json={"chat_id": f"c{chat}", "sender_id": f"u{chat}",
                                                            "text": next(texts)})
                if r.status_code != 200 or r.json().get("error"):
                    errors += 1
                    if errors <= 5:
                        print(f"\n  error {r.status_code}: {r.text[:200]}", file=sys.stderr)
                done += 1
                if done % args.sample_every == 0:
                    sample()
                if done % 100 == 0:
                    progress(done, args.messages, samples, started)

        await asyncio.gather(*(client_task() for _ in range(args.concurrency)))
    if done % args.sample_every:
        sample()
    print(file=sys.stderr)
    return samples, errors


def progress(done: int, total: int, samples: list[Sample], started: float) -> None:
    elapsed = time.perf_counter() - started
    rate = done / elapsed if elapsed else 0.0
    rss = f"{samples[-1].rss_mib:.0f} MiB" if samples else "-"
    eta = (total - done) / rate / 60 if rate else 0.0
    print(f"\r  {done:>7,}/{total:,} messages  {rate:5.1f} msg/s  RSS {rss}  ETA {eta:4.1f} min ",
          end="", file=sys.stderr, flush=True)


def growth(samples: list[Sample], window: int) -> tuple[int, float]:
    """(the window used, RSS growth over it in %): the last ``window`` messages, or the last
    half of the run when it is shorter than twice that."""
    last = samples[-1]
    span = window if last.messages >= 2 * window else last.messages // 2
    base = min(samples, key=lambda s: abs(s.messages - (last.messages - span)))
    return last.messages - base.messages, (last.rss_mib - base.rss_mib) / base.rss_mib * 100


def report(samples: list[Sample], errors: int, args: argparse.Namespace, idle_rss: float) -> dict[str, Any]:
    span, pct = growth(samples, 20_000)
    print(f"soak: {samples[-1].messages:,} messages over {args.chats} chats ({args.order}), concurrency "
          f"{args.concurrency}, {args.role}s, working set {args.working_set} tokens, fake model 0 ms; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}{'; with censuses' if args.census else ''}")
    print(f"  idle RSS after start: {idle_rss:.0f} MiB; errors: {errors}")
    print(f"  {'messages':>9}  {'RSS MiB':>8}  {'msgs/s':>7}  {'workspace MiB':>13}  {'elapsed s':>9}")
    for s in samples:
        print(f"  {s.messages:>9,}  {s.rss_mib:>8.1f}  {s.msgs_per_s:>7.1f}  {s.workspace_mib:>13.1f}  {s.elapsed_s:>9.0f}")
    total = samples[-1].elapsed_s
    print(f"  overall {samples[-1].messages / total:.1f} msg/s; RSS growth over the last {span:,} messages: "
          f"{pct:+.1f} %")
    return {"messages": samples[-1].messages, "chats": args.chats, "order": args.order,
            "concurrency": args.concurrency, "role": args.role, "working_set_tokens": args.working_set,
            "idle_rss_mib": round(idle_rss, 1), "errors": errors, "growth_window": span,
            "growth_pct": round(pct, 2), "census": args.census, "samples": [asdict(s) for s in samples]}


def write_out(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    with (out / "soak.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(result["samples"][0]))
        writer.writeheader()
        writer.writerows(result["samples"])
    print(f"  samples: {out / 'soak.csv'} and {out / 'soak.json'}")


def parse_args() -> argparse.Namespace:
    class Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=Help)
    parser.add_argument("--messages", type=int, default=50_000, help="messages to post in all")
    parser.add_argument("--chats", type=int, default=500, help="distinct chats (sessions) they go to")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight at once")
    parser.add_argument("--order", choices=("round-robin", "random"), default="round-robin",
                        help="which chat each message goes to")
    parser.add_argument("--seed", type=int, default=46, help="seed of the random order and texts")
    parser.add_argument("--sample-every", type=int, default=1000, help="messages between RSS samples")
    parser.add_argument("--working-set", type=int, default=512,
                        help="agents.defaults.workingSetTokens: small, so chats consolidate often")
    parser.add_argument("--max-sessions", type=int, default=16, help="agents.defaults.maxConcurrentSessions")
    parser.add_argument("--role", choices=("guest", "owner"), default="guest",
                        help="senders are guests, or each an owner in a private chat (memory flush on)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop posting after this long and report the messages done so far")
    parser.add_argument("--out", type=Path, default=Path("soak-out"), help="folder for soak.csv / soak.json")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workspace (path printed)")
    parser.add_argument("--census", action="store_true",
                        help="at every sample the daemon counts its objects by type (OUT/census.txt)")
    args = parser.parse_args()
    if args.messages < 1 or args.chats < 1 or args.concurrency < 1 or args.sample_every < 1:
        parser.error("--messages, --chats, --concurrency and --sample-every must be positive")
    return args


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "census.txt").unlink(missing_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="lucid-soak-"))
    llm = FakeModel("soak")
    try:
        daemon = Daemon(tmp, llm.base_url, args)
        try:
            idle_rss = rss_mib(daemon.proc.pid)
            samples, errors = asyncio.run(drive(daemon, args))
        finally:
            code = daemon.stop()
    finally:
        llm.stop()
    result = report(samples, errors, args, idle_rss)
    result["exit_code"] = code
    write_out(args.out, result)
    if args.keep:
        print(f"  workspace kept: {tmp}")
    else:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
