"""Issue 42, scale: the embedding pass after a sync finds the chunks that need a vector from
the change log, not by joining every chunk against the vector cache (half a second at 100k
windows, after every turn) — and always finds exactly what that full scan would."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from lucidgate.memory.search import MemoryIndex, _db, _rows
from lucidgate.memory.search.unembedded import Unembedded
from tests.search_kit import CountingEmbedder

HEADER = {"_type": "metadata", "key": "telegram:42",
          "metadata": {"origin": {"channel": "telegram", "chat_type": "direct"}}}


def full_scan(conn: sqlite3.Connection) -> set[int]:
    return {r[0] for r in conn.execute(
        "SELECT c.id FROM chunks c LEFT JOIN vectors v ON v.hash = c.hash AND v.provider = 'p' "
        "AND v.model = 'm' WHERE v.hash IS NULL")}


def test_the_log_finds_what_a_full_scan_finds_through_every_kind_of_change() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(_db._SCHEMA)
    tracker = Unembedded()
    rng = np.random.default_rng(11)
    for step in range(400):
        ids = [r[0] for r in conn.execute("SELECT id FROM chunks")]
        roll = rng.random()
        conn.execute("BEGIN")
        if ids and roll < 0.2:  # a chunk goes
            victim = ids[int(rng.integers(len(ids)))]
            conn.execute("DELETE FROM chunks WHERE id = ?", (victim,))
            conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (?, ?)", (victim, _rows.DELETED))
        elif ids and roll < 0.45:  # one gets its vector (or the vector of a text it shares)
            cid = ids[int(rng.integers(len(ids)))]
            digest = conn.execute("SELECT hash FROM chunks WHERE id = ?", (cid,)).fetchone()[0]
            conn.execute("INSERT OR IGNORE INTO vectors VALUES ('p', 'm', ?, 3, x'00')", (digest,))
            conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (?, ?)", (cid, _rows.ADDED))
        elif roll < 0.47:  # the model's vectors dropped
            conn.execute("DELETE FROM vectors")
            conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (0, ?)", (_rows.RESET,))
        else:  # a chunk added; some texts repeat one already embedded
            digest = f"h{int(rng.integers(step + 1))}"
            cid = conn.execute("INSERT INTO chunks (path, source, hash, text, owner) VALUES "
                               "('p', 'notes', ?, ?, 1)", (digest, f"text {digest}")).lastrowid
            conn.execute("INSERT INTO vector_log (chunk_id, op) VALUES (?, ?)", (cid, _rows.ADDED))
        if step % 50 == 49:  # another process trimmed the log past what this reader saw
            conn.execute("DELETE FROM vector_log WHERE seq <= (SELECT max(seq) FROM vector_log) - 1")
        conn.execute("COMMIT")
        if step % 3 == 0:
            found = tracker.missing(conn, "p", "m")
            assert {r[0] for r in found} == full_scan(conn)
            assert all(text == f"text {digest}" for _, digest, text in found)
    assert 1 < tracker.full_scans < 60  # resets and trims only, not every pass
    scans = tracker.full_scans
    tracker.missing(conn, "p", "q")  # another model: nothing of the log is known for it
    assert tracker.full_scans == scans + 1


@pytest.fixture(scope="module")
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


def turn(i: int) -> bytes:
    return (json.dumps({"role": "user", "content": f"question {i} about the ferry"}) + "\n"
            + json.dumps({"role": "assistant", "content": f"answer {i}"}) + "\n").encode()


def test_turns_embed_only_their_new_windows_without_a_full_scan(tmp_path: Path, embedder: CountingEmbedder) -> None:
    (tmp_path / "sessions").mkdir()
    chat = tmp_path / "sessions" / "telegram_42.jsonl"
    chat.write_bytes(json.dumps(HEADER).encode() + b"\n" + turn(0) + turn(1))
    gateway, cli = MemoryIndex(tmp_path, embedder=embedder), MemoryIndex(tmp_path, embedder=embedder)
    gateway.sync()
    scans = gateway._unembedded.full_scans
    for i in range(2, 6):
        with chat.open("ab") as fh:
            fh.write(turn(i))
        (gateway if i % 2 else cli).sync_files()  # either process may index the turn
        before = len(embedder.texts)
        gateway.embed_missing()
        new = embedder.texts[before:]
        assert new and any(f"question {i} about the ferry" in t or f"answer {i}" in t for t in new)
        with gateway._lock:
            assert full_scan_for(gateway) == set()  # nothing left without a vector
    assert gateway._unembedded.full_scans == scans  # the log sufficed every time
    gateway.close()
    cli.close()


def full_scan_for(index: MemoryIndex) -> set[int]:
    assert index.embedder is not None
    return {r[0] for r in index.conn().execute(
        "SELECT c.id FROM chunks c LEFT JOIN vectors v ON v.hash = c.hash AND v.provider = ? "
        "AND v.model = ? WHERE v.hash IS NULL", (index.embedder.provider, index.embedder.model))}
