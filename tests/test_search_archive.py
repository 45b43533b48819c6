"""Nothing is deleted: compaction moves processed history to the monthly archive (still
searchable), history records provenance, and /forget is the one deletion — from the memory
files, history, the archive and the index (transcripts stay, but are no longer found)."""

from __future__ import annotations

import json
from pathlib import Path

from lucidgate.memory._history_archive import archive_entries
from lucidgate.memory.forget import forget
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.search import MemoryIndex, search
from lucidgate.memory.store import MemoryStore
from tests.search_kit import transcript


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_compaction_archives_instead_of_deleting(workspace: Path) -> None:
    store = MemoryStore(workspace, max_history_entries=10)
    for i in range(1, 31):
        extra = ": the spare key is under the blue flowerpot" if i == 1 else ""
        await store.append_history(f"- fact number {i}{extra}", session_key="telegram:1",
                                   channel="telegram", chat_type="private", owner=True)
    await store.set_dream_cursor(25)
    assert await store.compact_history() == 20
    kept = _entries(store.history_path)
    archived = [e for f in sorted((workspace / "memory" / "archive").glob("history-*.jsonl"))
                for e in _entries(f)]
    assert [e["cursor"] for e in kept] == list(range(21, 31))
    assert [e["cursor"] for e in archived] == list(range(1, 21))
    assert archived[0]["content"].startswith("- fact number 1:")
    assert archived[0]["channel"] == "telegram" and archived[0]["owner"] is True
    month = archived[0]["timestamp"][:7]
    assert (workspace / "memory" / "archive" / f"history-{month}.jsonl").exists()
    # a compaction interrupted after archiving and re-run never archives twice
    raw = (workspace / "memory" / "archive" / f"history-{month}.jsonl").read_bytes().splitlines(keepends=True)
    assert archive_entries(workspace / "memory" / "archive", raw[-5:]) == 0
    # and the archived entries stay findable
    idx = MemoryIndex(workspace, embedder=None)
    idx.sync()
    [hit] = search(idx, "where is the spare key", k=1)
    assert hit.cursor == 1 and hit.path.startswith("memory/archive/history-")


async def test_forget_removes_from_files_history_archive_and_index(workspace: Path) -> None:
    git = GitStore(workspace)
    git.init()
    store = MemoryStore(workspace, max_history_entries=10)
    (workspace / "memory").mkdir(exist_ok=True)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- Secret: the safe code is 4711\n- Likes jazz\n")
    await store.append_history("- The safe code is 4711\n- Bought a lamp", session_key="cli:1")
    for i in range(20):
        await store.append_history(f"- filler {i}", session_key="cli:1")
    await store.set_dream_cursor(21)
    await store.compact_history()  # the safe-code entry is now in the archive
    (workspace / "sessions").mkdir(exist_ok=True)
    (workspace / "sessions" / "cli_1.jsonl").write_text(transcript("cli:1", [
        ("user", "remember the safe code is 4711"), ("assistant", "Got it."),
        ("user", "what lamp should I buy?"), ("assistant", "A warm white one.")]))
    idx = MemoryIndex(workspace, embedder=None)
    idx.sync()
    assert len(search(idx, "safe code 4711", k=10)) >= 3
    report = await forget(store, git, "safe code", index=idx)
    assert any("4711" in line for line in report.removed)
    assert report.history_entries == 1 and report.files == {"memory/MEMORY.md": 1}
    assert report.index_chunks >= 3
    everything = "".join(p.read_text() for p in workspace.rglob("*.jsonl") if "sessions" not in p.parts)
    assert "4711" not in everything and "Bought a lamp" in everything  # only the fact went
    assert "4711" not in (workspace / "memory" / "MEMORY.md").read_text()
    assert all("4711" not in h.text for h in search(idx, "safe code 4711", k=10))
    assert any("lamp" in h.text for h in search(idx, "lamp", k=10))
    assert "4711" in (workspace / "sessions" / "cli_1.jsonl").read_text()  # transcripts append-only
