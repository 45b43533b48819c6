"""The recall index reads only what was appended to a transcript or to history.jsonl
(issue 16: a turn's index work must not grow with the session), and ends up with exactly
the chunks a whole-file pass makes, whatever was appended: tool lines, failed turns,
corrupt lines, a line caught half-written, a rewritten header, a shrunk file."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucidgate.memory.search import MemoryIndex, search
from lucidgate.memory.search.chunking import WINDOW_MESSAGES, WINDOW_STRIDE
from lucidgate.memory.search.service import RecallService
from tests.search_kit import CountingEmbedder
from tests.waiting import until

HEADER = {"_type": "metadata", "key": "telegram:42",
          "metadata": {"origin": {"channel": "telegram", "chat_type": "private"}}}


def line(role: str, text: str, **extra: object) -> bytes:
    return (json.dumps({"role": role, "content": text, "timestamp": "2026-11-26T05:00:00", **extra})
            + "\n").encode()


# The date line every window starts with (the stamp ``line`` writes has no zone: no "UTC").
STAMP = "Thu 26 Nov 2026 05:00\n"


def rows(index: MemoryIndex) -> Counter:
    """Every chunk row but its id: what a search can find, with its provenance."""
    return Counter(index.conn().execute(
        "SELECT c.source, c.path, c.hash, c.text, c.start_line, c.end_line, c.cursor, c.session_key, "
        "c.date, c.channel, c.chat_type, c.owner, f.body FROM chunks c "
        "JOIN chunks_fts f ON f.rowid = c.id").fetchall())


def whole_file_rows(workspace: Path, tmp: Path) -> Counter:
    fresh = MemoryIndex(workspace, embedder=None, path=tmp / "fresh.sqlite")
    fresh.sync_files()
    try:
        return rows(fresh)
    finally:
        fresh.close()


LINES = st.one_of(
    st.tuples(st.sampled_from(["user", "assistant"]), st.text(min_size=1, max_size=40))
    .map(lambda t: line(*t)),
    st.just(line("tool", "tool output")),
    st.just(line("assistant", "", tool_calls=[{"id": "c"}])),
    st.just(line("assistant", "a failed turn", status="error")),
    st.just(b"{not json\n"),
    st.just(b"\n"),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.lists(LINES, max_size=7),
                                  st.one_of(st.just(0), st.just(1), st.integers(0, 30))),
                        min_size=1, max_size=8))
def test_appending_in_any_pieces_gives_the_chunks_of_a_whole_file_pass(
        tmp_path_factory: pytest.TempPathFactory, batches: list[tuple[list[bytes], int]]) -> None:
    tmp = tmp_path_factory.mktemp("appended")
    workspace = tmp / "ws"
    (workspace / "sessions").mkdir(parents=True)
    path = workspace / "sessions" / "telegram_42.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n")
    index = MemoryIndex(workspace, embedder=None)
    index.sync_files()
    pending = b""
    for lines, cut in batches:
        data = pending + b"".join(lines)
        # Some batches end part-way through a line (1: only its newline is missing): a sync
        # may catch a write half done.
        cut = min(cut, len(data))
        with path.open("ab") as fh:
            fh.write(data[:len(data) - cut])
        pending = data[len(data) - cut:]
        index.sync_files()
        assert rows(index) == whole_file_rows(workspace, tmp)
    with path.open("ab") as fh:
        fh.write(pending)
    index.sync_files()
    assert rows(index) == whole_file_rows(workspace, tmp)


def test_a_turn_reads_what_it_appended_not_the_transcript(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "telegram_42.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + b"".join(
        line("user", f"message {i} about the harbour") + line("assistant", f"answer {i}")
        for i in range(500)))
    index = MemoryIndex(tmp_path, embedder=None)
    index.sync_files()
    whole_reads: list[Path] = []
    real_read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: whole_reads.append(p) or real_read_bytes(p))
    with path.open("ab") as fh:
        fh.write(line("user", "the lighthouse keeper is called Ondine") + line("assistant", "noted"))
    assert index.sync_files() == 1
    assert whole_reads == []  # no whole-file read
    [hit] = search(index, "Ondine", k=1)
    assert hit.session_key == "telegram:42" and "lighthouse keeper" in hit.text
    monkeypatch.undo()
    assert rows(index) == whole_file_rows(tmp_path, tmp_path)


def test_each_message_is_in_the_windows_a_whole_pass_gives(tmp_path: Path) -> None:
    """Windows overlap by WINDOW_MESSAGES - WINDOW_STRIDE; the incremental path keeps that."""
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "telegram_42.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n")
    index = MemoryIndex(tmp_path, embedder=None)
    for i in range(9):  # one message per sync: every window is made while still open
        with path.open("ab") as fh:
            fh.write(line("user" if i % 2 == 0 else "assistant", f"m{i}"))
        index.sync_files()
    texts = sorted(r[3] for r in rows(index))
    starts = range(0, 9 - WINDOW_MESSAGES + WINDOW_STRIDE, WINDOW_STRIDE)
    expected = sorted(STAMP + "\n".join(f"{'user' if i % 2 == 0 else 'assistant'}: m{i}"
                                for i in range(s, min(9, s + WINDOW_MESSAGES))) for s in starts)
    assert texts == expected


def test_a_rewritten_header_or_a_shrunk_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "telegram_42.jsonl"
    body = b"".join(line("user", f"question {i}") + line("assistant", f"reply {i}") for i in range(20))
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + body)
    index = MemoryIndex(tmp_path, embedder=None)
    index.sync_files()
    moved = {**HEADER, "metadata": {"origin": {"channel": "slack", "chat_type": "channel"}}}
    path.write_bytes(json.dumps(moved).encode() + b"\n" + body + line("user", "after the rewrite"))
    index.sync_files()
    assert rows(index) == whole_file_rows(tmp_path, tmp_path / "a")
    assert {r[9] for r in rows(index)} == {"slack"}  # provenance came from the new header
    # Same first line, same length and more, different middle: the tail check catches it.
    path.write_bytes(json.dumps(moved).encode() + b"\n" + body.replace(b"question", b"QUESTION")
                     + line("user", "after the rewrite") + line("assistant", "and more"))
    index.sync_files()
    assert rows(index) == whole_file_rows(tmp_path, tmp_path / "b")
    assert search(index, "QUESTION", k=1)
    path.write_bytes(json.dumps(moved).encode() + b"\n" + line("user", "short now"))
    index.sync_files()
    assert rows(index) == whole_file_rows(tmp_path, tmp_path / "c")


def test_history_entries_are_read_as_they_are_appended(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    path = tmp_path / "memory" / "history.jsonl"

    def entry(cursor: int, text: str) -> bytes:
        return (json.dumps({"cursor": cursor, "content": text, "timestamp": "2026-11-26T05:00:00",
                            "session_key": "telegram:42"}) + "\n").encode()

    path.write_bytes(b"".join(entry(i, f"summary {i}") for i in range(1, 30)))
    index = MemoryIndex(tmp_path, embedder=None)
    index.sync_files()
    data = entry(30, "the user moved to Porto")
    with path.open("ab") as fh:
        fh.write(data[:-9])  # caught while being written
    index.sync_files()
    with path.open("ab") as fh:
        fh.write(data[-9:-1])  # all but its newline: a whole entry, read again next time
    index.sync_files()
    with path.open("ab") as fh:
        fh.write(data[-1:] + entry(31, "the user adopted a cat"))
    index.sync_files()
    assert rows(index) == whole_file_rows(tmp_path, tmp_path)
    assert search(index, "Porto", k=1)[0].cursor == 30


def test_two_indexes_on_one_file_do_not_duplicate_an_append(tmp_path: Path) -> None:
    """The gateway and a CLI process may both sync after the same append."""
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "telegram_42.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + line("user", "first"))
    gateway, cli = MemoryIndex(tmp_path, embedder=None), MemoryIndex(tmp_path, embedder=None)
    gateway.sync_files()
    with path.open("ab") as fh:
        fh.write(line("assistant", "second") + line("user", "third"))
    gateway.sync_files()
    cli.sync_files()
    with path.open("ab") as fh:
        fh.write(line("assistant", "fourth"))
    cli.sync_files()
    gateway.sync_files()
    assert rows(gateway) == whole_file_rows(tmp_path, tmp_path)


def test_appends_after_a_reindex_are_read_right(tmp_path: Path) -> None:
    """``lucid memory reindex`` swaps in fresh tables: the resume marks must come with them."""
    from lucidgate.memory.search.rebuild import rebuild

    (tmp_path / "sessions").mkdir()
    late, early = tmp_path / "sessions" / "z_late.jsonl", tmp_path / "sessions" / "a_early.jsonl"
    index = MemoryIndex(tmp_path, embedder=None)
    # The live index sees z first; a fresh build reads a first: the row ids differ.
    for path in (late, early):
        path.write_bytes(json.dumps(HEADER).encode() + b"\n" + b"".join(
            line("user" if i % 2 == 0 else "assistant", f"{path.stem} m{i}") for i in range(15)))
        index.sync_files()
    rebuild(index)
    with late.open("ab") as fh:
        fh.write(line("assistant", "m15") + line("user", "m16"))
    index.sync_files()
    assert rows(index) == whole_file_rows(tmp_path, tmp_path)


def embedded(embedder: CountingEmbedder) -> list[str]:
    return [t for t in embedder.texts if t != "dimension probe"]


def _turns(count: int) -> bytes:
    return b"".join(line("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(count))


def test_a_half_written_turn_is_embedded_once_done_or_once_settled(tmp_path: Path) -> None:
    assert (WINDOW_MESSAGES, WINDOW_STRIDE) == (4, 4)  # the windows this test spells out
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "telegram_42.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + _turns(5))  # two turns, then a question
    embedder = CountingEmbedder()
    index = MemoryIndex(tmp_path, embedder=embedder)
    index.sync_files()
    index.embed_missing(settle_s=60)
    assert embedded(embedder) == [STAMP + "user: m0\nassistant: m1\nuser: m2\nassistant: m3"]
    assert index.settling == 1
    assert STAMP + "user: m4" in [h.text for h in search(index, "m4", k=5)]  # keyword search finds it meanwhile
    for i in (5, 6, 7):  # the answer, a question and its answer: that window is done
        with path.open("ab") as fh:
            fh.write(line("user" if i % 2 == 0 else "assistant", f"m{i}"))
        index.sync_files()
        index.embed_missing(settle_s=60)
    assert embedded(embedder)[1:] == [STAMP + "user: m4\nassistant: m5\nuser: m6\nassistant: m7"]
    assert index.settling == 0  # none of the three half-written versions was embedded
    with path.open("ab") as fh:
        fh.write(line("user", "m8"))  # a question never answered
    index.sync_files()
    index.embed_missing(settle_s=60)
    assert index.settling == 1 and len(embedded(embedder)) == 2
    long_ago = path.stat().st_mtime - 120
    os.utime(path, (long_ago, long_ago))  # quiet for two minutes
    index.sync_files()
    index.embed_missing(settle_s=60)
    assert embedded(embedder)[2:] == [STAMP + "user: m8"] and index.settling == 0


async def test_the_service_comes_back_for_a_settling_window_by_itself(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "telegram_42.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + _turns(3))
    written = path.stat().st_mtime_ns
    embedder = CountingEmbedder()
    index = MemoryIndex(tmp_path, embedder=embedder)
    index.now_ns = lambda: written  # just written
    service = RecallService(index, watch=False, start_delay_s=0, settle_s=0.2)
    await service.start()
    try:
        await asyncio.wait_for(service.synced.wait(), 60)
        assert embedded(embedder) == [] and index.settling == 1
        index.now_ns = lambda: written + 120_000_000_000  # two quiet minutes later
        # Nothing changes on disk: the service's own timer brings it back.
        await until(lambda: embedded(embedder) == [STAMP + "user: m0\nassistant: m1\nuser: m2"],
                    what="the settled window embedded")
        assert index.settling == 0
    finally:
        await service.stop()
