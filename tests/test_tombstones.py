"""Tombstones: hashed records of what was forgotten, matched across case and line wraps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lucidgate.memory.forget import forget
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.store import MemoryStore
from lucidgate.memory.tombstones import Tombstones, redact_message


def test_a_tombstone_is_hashed_and_matches_across_case_and_wraps(tmp_path: Path) -> None:
    stones = Tombstones(tmp_path)
    stone = stones.add("My cat is named  Luna", by="the owner")
    raw = (tmp_path / "state" / "forgotten.json").read_text()
    assert "luna" not in raw.lower() and stone.id in raw and "the owner" in raw
    matcher = stones.matcher()
    assert matcher.redact("Note: MY CAT is\n   named luna, ok") == "Note: [forgotten], ok"
    assert matcher.drop_lines("# Pets\n- my cat is\n  named Luna\n- a dog\n") == (
        "# Pets\n- a dog\n", ["- my cat is", "  named Luna"])
    assert not matcher.matches("my dog is named Luna")


def test_un_forget_and_kept_text_and_an_older_plain_list(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / ".forgotten.json").write_text(json.dumps(["safe code"]))
    stones = Tombstones(tmp_path)
    assert stones.matcher().matches("the SAFE code is 1")  # migrated, hashed
    assert not (tmp_path / "memory" / ".forgotten.json").exists()
    kept = stones.add("tea shop", keep_text=True)
    assert [t.shown() for t in stones.items()][-1] == "'tea shop'"
    assert stones.remove(kept.id[:6]) == kept
    assert not stones.matcher().matches("the tea shop")
    assert stones.remove("nope") is None


def test_redacting_a_message_covers_text_parts_and_tool_arguments(tmp_path: Path) -> None:
    stones = Tombstones(tmp_path)
    stones.add("Luna")
    message = {"role": "assistant", "content": [{"type": "text", "text": "hi Luna"}],
               "tool_calls": [{"id": "1", "function": {"name": "x", "arguments": '{"a": "luna"}'}}]}
    shown = redact_message(message, stones.matcher())
    assert "luna" not in json.dumps(shown).lower() and "luna" in json.dumps(message).lower()


async def test_forget_matches_a_phrase_across_a_line_wrap_in_every_file(tmp_path: Path) -> None:
    ws = tmp_path
    (ws / "memory").mkdir()
    (ws / "USER.md").write_text("# User\n- Name: Ana\n" + "".join(f"- fact {i}\n" for i in range(20)))
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n- my cat is\n  named LUNA\n- Project uses Python\n")
    (ws / "memory" / "2026-01-05-vet.md").write_text("- My Cat Is Named\nLuna, vet at 9\n- buy milk\n")
    store, git = MemoryStore(ws), GitStore(ws)
    await git.ainit()
    await store.append_history("- my cat is named\n  Luna\n- bought a lamp", session_key="cli:1")
    report = await forget(store, git, "my cat is named Luna", by="test")
    assert report.files == {"memory/MEMORY.md": 2, "memory/2026-01-05-vet.md": 2}
    assert report.history_lines == 2 and report.history_entries == 1
    assert (ws / "memory" / "MEMORY.md").read_text() == "# Memory\n- Project uses Python\n"
    assert (ws / "memory" / "2026-01-05-vet.md").read_text() == "- buy milk\n"
    history = (ws / "memory" / "history.jsonl").read_text()
    assert "luna" not in history.lower() and "bought a lamp" in history
    # and it stays out: an echo through the store's writers is dropped
    await store.append_history("- The cat: my cat is named luna", session_key="cli:1")
    await store.write_text("memory", "# Memory\n- my cat is named Luna\n- new fact\n")
    assert "luna" not in (ws / "memory" / "history.jsonl").read_text().lower()
    assert (ws / "memory" / "MEMORY.md").read_text() == "# Memory\n- new fact\n"


async def test_a_forget_from_another_process_reaches_sessions_already_loaded(tmp_path: Path) -> None:
    from lucidgate.memory.sessions import SessionStore

    sessions = SessionStore(tmp_path / "sessions", tombstones=Tombstones(tmp_path))
    session = await sessions.get("cli:1")
    await sessions.append(session, {"role": "user", "content": "my cat is named Luna"})
    Tombstones(tmp_path).add("luna", by="lucid memory forget")  # the CLI's own instance
    again = await sessions.get("cli:1")
    assert again is session and again.messages[-1]["content"] == "my cat is named [forgotten]"
    assert "Luna" in session.path.read_text()  # the transcript keeps the record
    await sessions.append(session, {"role": "assistant", "content": "Luna is a nice name"})
    assert session.messages[-1]["content"] == "[forgotten] is a nice name"


def test_an_export_carries_transcripts_redacted(make_config: Any, workspace: Path, tmp_path: Path) -> None:
    import tarfile

    from lucidgate.gateway.migrate.archive import export_archive
    from lucidgate.gateway.stores import WorkspaceParts

    (workspace / "sessions").mkdir(exist_ok=True)
    head = {"_type": "metadata", "v": 1, "key": "cli:1"}
    said = {"role": "user", "content": "my cat is named Luna"}
    (workspace / "sessions" / "cli_1.jsonl").write_text(json.dumps(head) + "\n" + json.dumps(said) + "\n")
    Tombstones(workspace).add("Luna")
    out = tmp_path / "export.tar.gz"
    config = make_config()
    stores = WorkspaceParts(config)
    export_archive(config, out, git=stores.git, tombstones=stores.tombstones)
    with tarfile.open(out) as tar:
        names = tar.getnames()
        member = tar.extractfile("workspace/sessions/cli_1.jsonl")
        assert member is not None
        exported = member.read().decode()
    assert names.count("workspace/sessions/cli_1.jsonl") == 1
    assert "my cat is named [forgotten]" in exported and "Luna" not in exported
    assert "Luna" in (workspace / "sessions" / "cli_1.jsonl").read_text()  # the record at home


async def test_forget_drops_the_chunks_and_their_cached_vectors(tmp_path: Path) -> None:
    from lucidgate.memory.search.index import MemoryIndex
    from tests.search_kit import CountingEmbedder

    ws = tmp_path
    (ws / "memory").mkdir()
    (ws / "USER.md").write_text("# User\n" + "".join(f"- fact {i}\n" for i in range(12)))
    (ws / "memory" / "2026-01-05.md").write_text("- The safe code is 4711\n")
    (ws / "memory" / "2026-01-06.md").write_text("- Bought a lamp for the desk\n")
    index = MemoryIndex(ws, embedder=CountingEmbedder())
    index.sync()
    conn = index.conn()
    hashes = [h for h, text in conn.execute("SELECT hash, text FROM chunks") if "4711" in text]
    assert hashes and conn.execute("SELECT count(*) FROM vectors WHERE hash = ?", (hashes[0],)).fetchone()[0]
    store, git = MemoryStore(ws), GitStore(ws)
    await git.ainit()
    report = await forget(store, git, "safe code", index=index)
    assert report.index_chunks == len(hashes)
    left = conn.execute(f"SELECT count(*) FROM vectors WHERE hash IN ({','.join('?' * len(hashes))})",
                        hashes).fetchone()[0]
    assert left == 0 and not [t for (t,) in conn.execute("SELECT text FROM chunks") if "4711" in t]
    assert any("lamp" in t for (t,) in conn.execute("SELECT text FROM chunks"))


def test_matching_folds_case_beyond_ascii_and_finds_a_text_deep_in_a_long_one(tmp_path: Path) -> None:
    stones = Tombstones(tmp_path)
    stones.add("Straße am See")
    matcher = stones.matcher()
    assert matcher.redact("Wohnt in der STRASSE AM\u00a0see, Haus 3") == "Wohnt in der [forgotten], Haus 3"
    long = "nothing to see here. " * 50_000 + "die Straße\tam See"
    assert matcher.spans(long) == [(len(long) - len("Straße\tam See"), len(long))]


async def test_the_daemons_inbox_journal_lets_go_of_a_forgotten_text(fake_llm: Any, make_config: Any,
                                                                     workspace: Path) -> None:
    """The inbox journal (every accepted text, until compacted) is compacted once the owner
    forgets something — here from another process, as ``lucid memory forget`` does."""
    from lucidgate.gateway.app import build_gateway
    from tests.fakes.channel import FakeChannel
    from tests.fakes.llm import Reply

    gw = build_gateway(make_config(agents={"defaults": {"dream": {"enabled": False}}}))
    ch = FakeChannel(gw.parts.bus, name="fake", owners=("boss",))
    gw.add_channel("fake", ch)
    fake_llm.queue(Reply("ok"), Reply("ok"))
    inbox = workspace / "inbox.jsonl"
    async with gw:
        await ch.say("my door code is 8812", chat_id="1", sender_id="boss")
        await ch.wait_replies(1, timeout=60)
        assert "8812" in inbox.read_text()  # handled, but kept until a compaction
        Tombstones(workspace).add("8812", by="lucid memory forget")
        await ch.say("thanks", chat_id="1", sender_id="boss")
        await ch.wait_replies(2, timeout=60)
        assert "8812" not in inbox.read_text()
