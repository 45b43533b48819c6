"""The recall index: chunk boundaries and exact lines, CJK keyword search, FTS syntax as
text, incremental sync (only changed chunks embedded), bad input, corruption, atomic
rebuild, and two processes using one index."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from lucidgate.memory.search import MemoryIndex, Scope, SearchError, search
from lucidgate.memory.search.chunking import chunk_markdown, estimate_tokens
from lucidgate.memory.search.rebuild import rebuild
from tests.search_kit import CountingEmbedder, FailingEmbedder, WrongDimEmbedder, transcript, write_corpus

REPO = Path(__file__).resolve().parents[1]


def _lines(text: str, start: int, end: int) -> str:
    return "\n".join(text.splitlines()[start - 1:end])


def test_markdown_chunks_have_exact_lines_and_overlap() -> None:
    paragraphs = [f"Paragraph {i}: " + " ".join(f"w{i}x{j}" for j in range(25)) for i in range(30)]
    text = "# Title\n\nintro line\n\n" + "\n\n".join(paragraphs) + "\n\n## Second\n\ntail\n"
    chunks = chunk_markdown(text, source="notes", path="memory/x.md", max_tokens=400, overlap=80)
    assert len(chunks) > 3
    for c in chunks:
        assert c.start_line is not None and c.end_line is not None
        assert c.text == _lines(text, c.start_line, c.end_line)  # exactly what the range holds
        assert estimate_tokens(c.text) <= 400 + 5
    # consecutive size-split chunks share a paragraph (overlap); the heading starts afresh
    body = [c for c in chunks if "## Second" not in c.text]
    assert any(a.end_line >= b.start_line for a, b in zip(body, body[1:]))
    last = chunks[-1]
    assert last.text.startswith("## Second") and last.end_line == text.count("\n")


def test_keyword_search_cjk_two_chars_and_syntax_chars(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "2026-05-02.md").write_text("# 2026-05-02\n\n我的猫叫小米，喜欢吃鱼。\n", "utf-8")
    (tmp_path / "memory" / "MEMORY.md").write_text("# Memory\n\n- 東京の天気は晴れです\n- C++ (and \"quotes\")\n")
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    [hit] = search(idx, "小米", k=1)
    assert hit.path == "memory/2026-05-02.md" and hit.start_line == 1 and hit.end_line == 3
    assert search(idx, "天気", k=1)[0].path == "memory/MEMORY.md"
    for weird in ['"*():-^', "C++ (and", 'NOT AND OR', "a*", '"unterminated', "NEAR(x y)"]:
        search(idx, weird)  # searched as text, never an FTS5 syntax error
    assert search(idx, '"quotes"')[0].path == "memory/MEMORY.md"
    for empty in ("", "   \n\t"):
        with pytest.raises(SearchError, match="empty"):
            search(idx, empty)


def test_incremental_sync_embeds_only_changed_chunks(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    emb = CountingEmbedder()
    idx = MemoryIndex(tmp_path, embedder=emb)
    idx.sync()
    total = idx.status()["chunks"]
    assert len(emb.texts) == total + 1  # every chunk once, plus the dimension probe
    emb.texts.clear()
    idx.sync()
    assert emb.texts == []  # nothing changed: nothing embedded
    note = tmp_path / "memory" / "2026-03-14.md"
    note.write_text(note.read_text() + "\n\n- Bought a new bicycle helmet.\n")
    with (tmp_path / "memory" / "history.jsonl").open("a") as fh:
        fh.write(json.dumps({"cursor": 999, "timestamp": "2026-06-01 10:00",
                             "content": "- Ordered a standing desk", "session_key": "telegram:42"}) + "\n")
    idx.sync()
    assert sorted(emb.texts) == sorted([note.read_text().strip("\n"),
                                         "Mon 1 Jun 2026 10:00\n- Ordered a standing desk"])
    assert idx.status()["chunks"] == total + 1
    # the same text in another file is not embedded again (cache keyed by content hash)
    emb.texts.clear()
    (tmp_path / "memory" / "copy.md").write_text(note.read_text())
    idx.sync()
    assert emb.texts == []
    # a deleted file takes its chunks with it
    (tmp_path / "memory" / "copy.md").unlink()
    idx.sync()
    assert idx.status()["chunks"] == total + 1


def test_model_change_reembeds(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    first = CountingEmbedder()
    MemoryIndex(tmp_path, embedder=first).sync()
    second = CountingEmbedder()
    second.model = "another-model"
    idx = MemoryIndex(tmp_path, embedder=second)
    idx.sync()
    assert len(second.texts) == idx.status()["chunks"] + 1
    assert idx.status()["embedded"] == idx.status()["chunks"]


class _FixedDim:
    provider, model, baseline = "test", "fixed", 0.0

    def __init__(self, dim: int) -> None:
        self.dim, self.texts = dim, 0

    def passages(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        rows = np.abs(np.sin(np.arange(len(texts) * self.dim, dtype=np.float32))).reshape(len(texts), self.dim)
        return rows + 0.01

    def query(self, text: str) -> np.ndarray:
        return np.ones(self.dim, dtype=np.float32)

    def ready(self) -> bool:
        return True


def test_dimension_change_reembeds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_corpus(tmp_path)
    first = _FixedDim(8)
    MemoryIndex(tmp_path, embedder=first).sync()
    second = _FixedDim(6)  # same provider and model name, new dimension (a config change)
    idx = MemoryIndex(tmp_path, embedder=second)
    idx.sync()
    chunks = idx.status()["chunks"]
    assert second.texts == chunks + 1 and idx.status()["embedded"] == chunks
    assert any("re-embedding" in r.getMessage() for r in caplog.records)
    assert idx.status()["vectors_on"] and search(idx, "Volvo", k=3)


@pytest.mark.parametrize("broken", [FailingEmbedder, WrongDimEmbedder])
def test_broken_embedder_falls_back_to_keywords(tmp_path: Path, broken: type,
                                                caplog: pytest.LogCaptureFixture) -> None:
    write_corpus(tmp_path)
    idx = MemoryIndex(tmp_path, embedder=broken())
    idx.sync()
    hits = search(idx, "Volvo", k=3)
    assert any("Volvo" in h.text for h in hits)
    status = idx.status()
    assert not status["vectors_on"] and status["embedder"].startswith("keyword-only")
    warnings = [r for r in caplog.records if "keyword-only" in r.getMessage()]
    assert len(warnings) == 1  # one log line, not one per batch or per search
    search(idx, "car", k=3)
    assert len([r for r in caplog.records if "keyword-only" in r.getMessage()]) == 1


def test_bad_files_never_break_the_sync(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    memory = tmp_path / "memory"
    (memory / "junk.md").write_bytes(os.urandom(4096) + b"\x00\xff")
    (memory / "latin1.md").write_bytes("caf\xe9 au lait".encode("latin-1"))
    big = "\n\n".join(f"## Part {i}\n" + ("lorem ipsum dolor sit amet " * 40) for i in range(2500))
    (memory / "big.md").write_text(big + "\n\nThe unicorn password is marmalade.\n")
    assert len(big) > 5_000_000 * 0.5
    (memory / "huge-line.md").write_text("x" * 300_000 + " needle-in-a-line\n")
    with (memory / "history.jsonl").open("a") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps([1, 2]) + "\n")
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    files = {r[0] for r in idx.conn().execute("SELECT DISTINCT path FROM chunks")}
    assert "memory/junk.md" not in files and "memory/latin1.md" not in files
    hit = search(idx, "unicorn marmalade", k=1)[0]
    assert hit.path == "memory/big.md" and "marmalade" in _lines(big + "\n\nThe unicorn password is marmalade.\n",
                                                                hit.start_line or 0, hit.end_line or 0)
    assert search(idx, "Volvo", k=1)[0].cursor is not None


def test_file_deleted_mid_sync(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    idx = MemoryIndex(tmp_path, embedder=None)
    victim = tmp_path / "memory" / "2026-03-14.md"
    real = idx._sync_file

    def vanish_first(rel: str, *args: object) -> int:
        if rel == "memory/2026-03-14.md" and victim.exists():
            victim.unlink()
        return real(rel, *args)  # type: ignore[arg-type]

    idx._sync_file = vanish_first  # type: ignore[method-assign]
    idx.sync()
    assert not any(h.path == "memory/2026-03-14.md" for h in search(idx, "Miso vet Tokyo"))
    assert search(idx, "Volvo", k=1)


def test_corrupt_index_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_corpus(tmp_path)
    db = tmp_path / "memory" / "index.sqlite"
    db.write_bytes(b"this is not a database" * 100)
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    assert search(idx, "Volvo", k=1)
    assert any("unusable" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "memory" / "index.sqlite.corrupt").exists()
    # deleting the file loses nothing either
    idx.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    again = MemoryIndex(tmp_path, embedder=None)
    again.sync()
    assert search(again, "Volvo", k=1)


def test_rebuild_swaps_atomically_and_reuses_vectors(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    emb = CountingEmbedder()
    live = MemoryIndex(tmp_path, embedder=emb)
    live.sync()
    before = live.status()["chunks"]
    (tmp_path / "memory" / "2026-07-01.md").write_text("# 2026-07-01\n\nAdopted a parrot named Kiwi.\n")
    emb.texts.clear()
    seen_during: list[int] = []
    reader = MemoryIndex(tmp_path, embedder=None)  # another connection, as another process would be

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "files" and done == total:
            # mid-rebuild the live index is still the whole old one
            seen_during.append(reader.conn().execute("SELECT count(*) FROM chunks").fetchone()[0])

    figures = rebuild(live, progress)
    assert seen_during == [before]
    assert figures["chunks"] == before + 1
    assert emb.texts == ["# 2026-07-01\n\nAdopted a parrot named Kiwi."]  # the rest came from the cache
    assert search(reader, "parrot Kiwi", k=1)[0].path == "memory/2026-07-01.md"
    assert not list((tmp_path / "memory").glob("index.sqlite.rebuild-*"))


def test_gateway_and_cli_search_one_index_concurrently(tmp_path: Path) -> None:
    """A second process syncs and searches while this one keeps writing and searching."""
    write_corpus(tmp_path)
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    script = (
        "import sys; from pathlib import Path\n"
        "from lucidgate.memory.search import MemoryIndex, search\n"
        "idx = MemoryIndex(Path(sys.argv[1]), embedder=None)\n"
        "for i in range(40):\n"
        "    idx.sync_files()\n"
        "    assert any('Volvo' in h.text for h in search(idx, 'Volvo', k=3))\n"
        "print('ok')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(40):
                with (tmp_path / "memory" / "history.jsonl").open("a") as fh:
                    fh.write(json.dumps({"cursor": 5000 + i, "timestamp": "2026-06-01 10:00",
                                         "content": f"- concurrent fact {i}", "session_key": "telegram:42"}) + "\n")
                idx.sync_files()
                search(idx, "Volvo", k=3)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    t.join()
    out, err = proc.communicate(timeout=120)
    assert errors == [] and proc.returncode == 0 and out.strip() == "ok", err
    idx.sync_files()
    assert len(search(idx, "concurrent fact 39", k=1)) == 1
    rows = idx.conn().execute("SELECT count(*), count(DISTINCT cursor) FROM chunks WHERE cursor >= 5000").fetchone()
    assert rows == (40, 40)  # no duplicates from two writers


def test_scope_guest_never_sees_owner_chunks(tmp_path: Path) -> None:
    write_corpus(tmp_path)
    idx = MemoryIndex(tmp_path, embedder=CountingEmbedder())
    idx.sync()
    group = Scope("telegram:-100")
    for query in ["penicillin", "Volvo", "小米", "Clara birthday", "Ada", "what car", "family dinner"]:
        for hit in search(idx, query, k=10, scope=group):
            assert hit.session_key == "telegram:-100", (query, hit)
    assert any("grandma" in h.text for h in search(idx, "family dinner", scope=group))
    # the owner's private chat sees everything
    assert any("penicillin" in h.text for h in search(idx, "penicillin", scope=Scope.everything()))


def test_the_asking_chats_live_part_is_never_a_hit_but_its_archived_part_is(tmp_path: Path) -> None:
    """The question itself is already in the prompt: found, it would rank first and push the
    real hits down the scale, which is relative to the best match."""
    write_corpus(tmp_path)
    (tmp_path / "sessions" / "cli_7.jsonl").write_text(transcript("cli:7", [
        ("user", "which garage fixed the blue Volvo XC40"), ("assistant", "Garage Meyer.")]))
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()

    def from_cli_7(live_from: tuple[str, int] | None) -> list[str]:
        hits = search(idx, "Volvo XC40 garage", k=10, scope=Scope(None, live_from=live_from))
        assert hits, live_from
        return [h.where() for h in hits if h.session_key == "cli:7"]

    assert from_cli_7(None) == ["sessions/cli_7.jsonl:2-3"]  # the control: the window is a hit
    assert from_cli_7(("cli:7", 2)) == []  # all of it live: in the prompt already
    assert from_cli_7(("cli:9", 2)) == ["sessions/cli_7.jsonl:2-3"]  # another chat's live part
    assert from_cli_7(("cli:7", 4)) == ["sessions/cli_7.jsonl:2-3"]  # archived: recall's to find


def test_index_opens_in_wal_mode(tmp_path: Path) -> None:
    idx = MemoryIndex(tmp_path, embedder=None)
    idx.sync()
    conn = sqlite3.connect(tmp_path / "memory" / "index.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
