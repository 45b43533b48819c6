"""Searches keep their in-memory vectors current from the index's change log instead of
reloading every vector whenever anything changed (issue 16: a turn's cost must not grow
with everything ever said). Whatever happened — appends, rewrites, deleted files, vectors
arriving later, another process writing, a trimmed log, a reindex — the cache holds exactly
what a fresh load would."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lucidgate.memory.search import MemoryIndex, Scope, search
from lucidgate.memory.search import _rows
from lucidgate.memory.search.query import _vectors
from lucidgate.memory.search.rebuild import rebuild
from lucidgate.memory.search.vector_cache import VectorCache
from tests.search_kit import CountingEmbedder

HEADER = {"_type": "metadata", "key": "telegram:42",
          "metadata": {"origin": {"channel": "telegram", "chat_type": "direct"}}}


def turn(i: int, topic: str = "the harbour") -> bytes:
    return (json.dumps({"role": "user", "content": f"question {i} about {topic}"}) + "\n"
            + json.dumps({"role": "assistant", "content": f"answer {i}"}) + "\n").encode()


def content(cache: VectorCache) -> dict[int, tuple[str | None, str, bytes]]:
    ids, keys, sources, matrix = cache.rows()
    return {int(i): (k, s, matrix[n].tobytes()) for n, (i, k, s) in enumerate(zip(ids, keys, sources, strict=True))}


def fresh_load(index: MemoryIndex) -> dict[int, tuple[str | None, str, bytes]]:
    assert index.embedder is not None
    cache = VectorCache(index.embedder.provider, index.embedder.model, index.dimension() or 0)
    with index._lock:
        cache.refresh(index.conn())
    return content(cache)


def current(index: MemoryIndex) -> VectorCache:
    with index._lock:
        cache = _vectors(index, index.conn())
    assert cache is not None
    return cache


@pytest.fixture(scope="module")
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


def test_a_turn_updates_the_vectors_without_reloading_them(tmp_path: Path, embedder: CountingEmbedder) -> None:
    (tmp_path / "sessions").mkdir()
    (tmp_path / "memory").mkdir()
    chat = tmp_path / "sessions" / "telegram_42.jsonl"
    chat.write_bytes(json.dumps(HEADER).encode() + b"\n" + b"".join(turn(i) for i in range(4)))
    (tmp_path / "memory" / "MEMORY.md").write_text("# Memory\n\n- The user keeps bees.\n")
    index = MemoryIndex(tmp_path, embedder=embedder)
    index.sync()
    cache = current(index)
    assert cache.full_loads == 1 and content(cache) == fresh_load(index)
    for i in range(4, 10):  # turns: windows added, open ones replaced, vectors arriving
        with chat.open("ab") as fh:
            fh.write(turn(i, "the lighthouse"))
        index.sync_files()
        assert content(current(index)) == fresh_load(index)  # keyword rows, vectors not yet
        index.embed_missing()
        assert content(current(index)) == fresh_load(index)
    (tmp_path / "memory" / "MEMORY.md").write_text("# Memory\n\n- The user keeps goats now.\n")
    (tmp_path / "sessions" / "other.jsonl").write_bytes(
        json.dumps({**HEADER, "key": "slack:C1"}).encode() + b"\n" + turn(1, "the orchard"))
    index.sync()
    assert content(current(index)) == fresh_load(index)
    (tmp_path / "sessions" / "other.jsonl").unlink()
    chat.write_bytes(json.dumps(HEADER).encode() + b"\n" + turn(0))  # rewritten shorter
    index.sync()
    assert content(current(index)) == fresh_load(index)
    assert current(index) is cache and cache.full_loads == 1  # never reloaded whole
    assert [h.path for h in search(index, "goats", k=1)] == ["memory/MEMORY.md"]


def test_another_process_a_trimmed_log_and_a_reindex(tmp_path: Path, embedder: CountingEmbedder,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sessions").mkdir()
    chat = tmp_path / "sessions" / "telegram_42.jsonl"
    chat.write_bytes(json.dumps(HEADER).encode() + b"\n" + turn(0))
    gateway, cli = MemoryIndex(tmp_path, embedder=embedder), MemoryIndex(tmp_path, embedder=embedder)
    gateway.sync()
    cache = current(gateway)
    with chat.open("ab") as fh:
        fh.write(turn(1) + turn(2))
    cli.sync()  # the other process indexes and embeds
    assert content(current(gateway)) == fresh_load(gateway) and cache.full_loads == 1
    # The gateway falls behind the kept log: it loads everything once, and is right.
    monkeypatch.setattr(_rows, "LOG_KEEP", 1)
    for i in range(3, 6):
        with chat.open("ab") as fh:
            fh.write(turn(i))
        cli.sync()
    assert content(current(gateway)) == fresh_load(gateway) and cache.full_loads == 2
    monkeypatch.undo()
    rebuild(cli)  # reindex swaps every table: readers reload once
    assert current(gateway) is cache and content(cache) == fresh_load(gateway)
    assert cache.full_loads == 3


def test_rows_stay_right_through_growth_and_compaction() -> None:
    """The matrix grows with spare room and drops dead rows once a quarter is dead."""
    import sqlite3

    from lucidgate.memory.search import _db

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(_db._SCHEMA)
    cache = VectorCache("p", "m", 3)
    rng = np.random.default_rng(7)
    alive: dict[int, bytes] = {}
    for step in range(300):
        conn.execute("BEGIN")
        if alive and step % 3 == 2:
            victim = sorted(alive)[int(rng.integers(len(alive)))]
            conn.execute("DELETE FROM chunks WHERE id = ?", (victim,))
            conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (?, 0)", (victim,))
            alive.pop(victim)
        else:
            vec = rng.random(3, dtype=np.float32).tobytes()
            cid = conn.execute("INSERT INTO chunks (path, source, hash, text, owner) VALUES "
                               "('p', 'notes', ?, 't', 1)", (f"h{step}",)).lastrowid
            conn.execute("INSERT INTO vectors VALUES ('p', 'm', ?, 3, ?)", (f"h{step}", vec))
            conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (?, 1)", (cid,))
            alive[int(cid)] = vec
        conn.execute("COMMIT")
        cache.refresh(conn)
        assert {i: v[2] for i, v in content(cache).items()} == alive
    assert cache.full_loads == 1


def test_searches_over_deleted_rows_rank_as_a_fresh_load_does(tmp_path: Path, embedder: CountingEmbedder) -> None:
    """Issue 42, scale: the whole matrix is scored and deleted rows masked (no copy of the
    live rows); with rows deleted by turns, every scope ranks exactly as a fresh index."""
    (tmp_path / "sessions").mkdir()
    chat = tmp_path / "sessions" / "telegram_42.jsonl"
    chat.write_bytes(json.dumps(HEADER).encode() + b"\n" + turn(0, "the lighthouse keeper"))
    (tmp_path / "sessions" / "other.jsonl").write_bytes(
        json.dumps({**HEADER, "key": "slack:C1"}).encode() + b"\n" + turn(1, "the lighthouse lamp"))
    index = MemoryIndex(tmp_path, embedder=embedder)
    index.sync()
    current(index)
    for i in range(1, 5):  # each turn replaces the chat's open window: a deleted row
        with chat.open("ab") as fh:
            fh.write(turn(i, "the lighthouse"))
        index.sync()
    cache = current(index)
    _, _, _, _, live, _ = cache.columns()
    assert cache.full_loads == 1 and not live.all()  # deleted rows are still in the matrix
    fresh = MemoryIndex(tmp_path, embedder=embedder)
    for scope in (Scope(), Scope("telegram:42"), Scope("slack:C1"), Scope.owner_trusted()):
        got = [(h.path, h.start_line, round(h.score, 6)) for h in search(index, "lighthouse", k=8, scope=scope)]
        want = [(h.path, h.start_line, round(h.score, 6)) for h in search(fresh, "lighthouse", k=8, scope=scope)]
        assert got == want
    assert all(h.session_key == "slack:C1" for h in search(index, "lighthouse", k=8, scope=Scope("slack:C1")))
    index.close()
    fresh.close()
