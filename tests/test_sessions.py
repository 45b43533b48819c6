"""Session transcripts: format, append-only writes, atomic header, corruption, keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.sessions import SessionStore, load_session_file


async def test_round_trip_and_format(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("telegram:42", origin={"channel": "telegram", "chat_id": "42"})
    await store.append(s, {"role": "user", "content": "hi"}, sync=True)
    await store.append(s, {"role": "assistant", "content": "hello"})
    lines = [json.loads(x) for x in s.path.read_text().splitlines()]
    assert lines[0]["_type"] == "metadata" and lines[0]["key"] == "telegram:42"
    assert lines[0]["v"] == 1 and lines[0]["last_consolidated_in"] == "telegram_42.state.json"
    assert [m["role"] for m in lines[1:]] == ["user", "assistant"]
    assert all("timestamp" in m for m in lines[1:])
    again = load_session_file(s.path)
    assert again.key == "telegram:42" and len(again.messages) == 2
    assert again.metadata["origin"]["chat_id"] == "42"


async def test_appends_do_not_rewrite_the_file(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    await store.append(s, {"role": "user", "content": "one"})
    inode = s.path.stat().st_ino
    for i in range(20):
        await store.append(s, {"role": "user", "content": f"m{i}"})
    assert s.path.stat().st_ino == inode  # same file: appended, never replaced


async def test_the_consolidation_mark_goes_to_the_sidecar_and_keeps_messages(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    for i in range(10):
        await store.append(s, {"role": "user", "content": f"m{i}"})
    transcript = s.path.read_bytes()
    await store.set_last_consolidated(s, 6)
    assert s.path.read_bytes() == transcript  # the transcript is not copied or touched
    fresh = load_session_file(s.path)
    assert fresh.last_consolidated == 6 and len(fresh.messages) == 10
    assert [m["content"] for m in fresh.active()] == ["m6", "m7", "m8", "m9"]
    assert not list(tmp_path.glob("*.tmp"))


async def test_header_rewrite_is_atomic_and_keeps_messages(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local", origin={"channel": "cli", "chat_id": "local"})
    for i in range(10):
        await store.append(s, {"role": "user", "content": f"m{i}"})
    s.metadata["title"] = "renamed"
    await asyncio.to_thread(store._rewrite, s)
    lines = s.path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["metadata"]["title"] == "renamed"  # line 1 is the new header
    fresh = load_session_file(s.path)
    assert [m["content"] for m in fresh.messages] == [f"m{i}" for i in range(10)]
    assert fresh.metadata["origin"] == {"channel": "cli", "chat_id": "local"}
    assert not [p for p in tmp_path.iterdir() if p.name != s.path.name]  # no temp file left


async def test_corrupt_lines_are_skipped(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    await store.append(s, {"role": "user", "content": "ok"})
    with s.path.open("a") as fh:
        fh.write("{not json\n[1,2]\n{\"no\": \"role\"}\n")
    await store.append(s, {"role": "assistant", "content": "fine"})
    loaded = load_session_file(s.path)
    assert [m["content"] for m in loaded.messages] == ["ok", "fine"]


async def test_pending_state_from_the_tail(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    assert s.pending_state() is None
    await store.append(s, {"role": "user", "content": "q"})
    assert s.pending_state() == "pending_user_turn"
    call = {"id": "c1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
    await store.append(s, {"role": "assistant", "content": None, "tool_calls": [call]})
    assert s.pending_state() == "runtime_checkpoint"
    await store.append(s, {"role": "tool", "tool_call_id": "c1", "name": "list_dir", "content": "x"})
    assert s.pending_state() == "runtime_checkpoint"
    await store.append(s, {"role": "assistant", "content": "done"})
    assert s.pending_state() is None


async def test_reset_keeps_old_transcript(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    await store.append(s, {"role": "user", "content": "remember me"})
    fresh = await store.reset(s)
    assert fresh.messages == [] and (await store.get("cli:local")) is fresh
    olds = list(tmp_path.glob("*.old"))
    assert len(olds) == 1 and "remember me" in olds[0].read_text()
    assert store.keys_on_disk() == ["cli:local"]


async def test_cache_is_bounded(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, cache_size=3)
    for i in range(10):
        await store.get(f"webhook:{i}")
    assert len(store._cache) == 3
    assert len(store.keys_on_disk()) == 10


def test_file_names_never_collide_or_escape() -> None:
    keys = ["telegram:42", "telegram_42", "webhook:a_b", "webhook:a:b", "webhook:../../etc/passwd",
            "webhook:a/b", "webhook:a-b", "slack:C1:1700000000.000100", "webhook:" + "x" * 400, "webhook:.hidden"]
    stems = [session_file_stem(k) for k in keys]
    assert len(set(stems)) == len(keys)
    for stem in stems:
        assert "/" not in stem and "\\" not in stem and not stem.startswith(".")
        assert len(stem) <= 160
    assert session_file_stem("telegram:42") == "telegram_42"


async def test_pinned_sessions_are_not_evicted(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, cache_size=2)
    busy = await store.get("webhook:busy")
    store.pin("webhook:busy")
    for i in range(5):
        await store.get(f"webhook:{i}")
    assert await store.get("webhook:busy") is busy  # the same object the worker holds
    store.unpin("webhook:busy")
    for i in range(5, 8):
        await store.get(f"webhook:{i}")
    assert store.cached("webhook:busy") is None


async def test_consolidation_mark_never_copies_the_transcript(tmp_path: Path) -> None:
    from lucidgate.memory.sessions import persisted_last_consolidated

    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    for i in range(10):
        await store.append(s, {"role": "user", "content": f"m{i}"})
    inode = s.path.stat().st_ino
    await store.set_last_consolidated(s, 4)
    assert s.path.stat().st_ino == inode  # the transcript was not rewritten
    assert persisted_last_consolidated(s.path) == 4
    fresh = await store.reset(s)
    assert persisted_last_consolidated(fresh.path) == 0  # /new starts clean


async def test_a_torn_last_line_does_not_swallow_the_next_message(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    await store.append(s, {"role": "user", "content": "before"})
    with s.path.open("a") as fh:
        fh.write('{"role": "assistant", "content": "half a li')  # crash mid-write
    fresh_store = SessionStore(tmp_path)
    s2 = await fresh_store.get("cli:local")
    await fresh_store.append(s2, {"role": "user", "content": "after the crash"}, sync=True)
    loaded = load_session_file(s2.path)
    assert [m["content"] for m in loaded.messages] == ["before", "after the crash"]


async def test_a_leftover_mark_never_hides_a_new_transcript(tmp_path: Path) -> None:
    from lucidgate.memory.sessions import state_path

    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    for i in range(4):
        await store.append(s, {"role": "user", "content": f"m{i}"})
    await store.set_last_consolidated(s, 4)
    s.path.unlink()  # the operator deleted the transcript; the mark stayed behind
    assert state_path(s.path).exists()
    fresh = await SessionStore(tmp_path).get("cli:local")
    await SessionStore(tmp_path).append(fresh, {"role": "user", "content": "new"})
    assert load_session_file(fresh.path).active()[0]["content"] == "new"


async def test_cancelled_append_keeps_memory_in_step_with_disk(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    task = asyncio.create_task(store.append(s, {"role": "user", "content": "cancel me"}, sync=True))
    await asyncio.sleep(0)  # the write has been handed to its thread
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    on_disk = [m["content"] for m in load_session_file(s.path).messages]
    assert [m["content"] for m in s.messages] == on_disk


async def test_line_one_never_shows_a_stale_consolidation_count(tmp_path: Path) -> None:
    from lucidgate.memory.sessions import persisted_last_consolidated, state_path

    store = SessionStore(tmp_path)
    s = await store.get("cli:local")
    for i in range(6):
        await store.append(s, {"role": "user", "content": f"m{i}"})
    await store.set_last_consolidated(s, 4)
    header = json.loads(s.path.read_text().splitlines()[0])
    assert "last_consolidated" not in header  # no count that consolidation leaves behind
    assert json.loads((tmp_path / header["last_consolidated_in"]).read_text())["last_consolidated"] == 4
    # An older (or imported) file keeps its count in line 1; a header rewrite moves it.
    legacy = tmp_path / "cli_old.jsonl"
    legacy.write_text(json.dumps({"_type": "metadata", "v": 1, "key": "cli:old", "metadata": {},
                                  "last_consolidated": 2}) + "\n"
                      + "".join(json.dumps({"role": "user", "content": f"o{i}"}) + "\n" for i in range(3)))
    old = await store.get("cli:old")
    assert old.last_consolidated == 2
    old.metadata["title"] = "renamed"
    await asyncio.to_thread(store._rewrite, old)
    assert "last_consolidated" not in json.loads(legacy.read_text().splitlines()[0])
    assert persisted_last_consolidated(legacy) == 2 and state_path(legacy).exists()
    assert load_session_file(legacy).active() == [old.messages[2]]
