"""A session holds in memory only what is still in context (issue 46, the soak).

A chat's archived prefix used to stay loaded for as long as its session was cached, so the
daemon's memory grew with every message ever exchanged rather than with the number of chats.
Archived positions are now one shared marker; whoever needs those lines reads the file.
"""

from __future__ import annotations

from pathlib import Path

from lucidgate.memory.sessions_view import SessionsOnDisk
from lucidgate.memory.sessions import ARCHIVED, Session, SessionStore, is_archived, load_session_file

TURNS = 300


def held(session: Session) -> int:
    """Message dicts the session keeps in memory (archived positions are the shared marker)."""
    return sum(1 for m in session.messages if not is_archived(m))


async def long_chat(store: SessionStore, key: str) -> Session:
    """``TURNS`` turns, consolidated every ten as the consolidator would (the newest kept)."""
    session = await store.get(key)
    for i in range(TURNS):
        await store.append(session, {"role": "user", "content": f"question {i}"},
                           {"role": "assistant", "content": f"answer {i}"})
        if i % 10 == 9:
            await store.set_last_consolidated(session, len(session.messages) - 2)
    return session


async def test_a_long_chat_holds_only_its_context(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await long_chat(store, "webhook:long")
    assert len(session.messages) == 2 * TURNS  # positions are kept: indexes stay valid
    assert session.last_consolidated == 2 * TURNS - 2
    assert held(session) == len(session.active()) == 2  # not 600 dicts
    assert [m["content"] for m in session.active()] == [f"question {TURNS - 1}", f"answer {TURNS - 1}"]
    # The file is the record: every line is still there, in order.
    full = await store.transcript(session)
    assert [m["content"] for m in full] == [x for i in range(TURNS) for x in (f"question {i}", f"answer {i}")]
    assert not any(is_archived(m) for m in full)


async def test_a_reloaded_session_holds_only_its_context_too(tmp_path: Path) -> None:
    await long_chat(SessionStore(tmp_path), "webhook:long")
    again = await SessionStore(tmp_path).get("webhook:long")  # a restart, or a cache miss
    assert len(again.messages) == 2 * TURNS and again.released == again.last_consolidated == 2 * TURNS - 2
    assert held(again) == 2
    assert again.pending_state() is None  # the tail still says the last turn was answered
    # Whoever reads the whole record directly still gets every message.
    record = load_session_file(again.path)
    assert held(record) == 2 * TURNS and record.last_consolidated == 2 * TURNS - 2


async def test_archived_lines_are_still_served_to_readers(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await long_chat(store, "webhook:long")
    view = SessionsOnDisk(store)
    said = await view.said("webhook:long", after=0, limit=1000)
    assert said is not None and [s["text"] for s in said] == [f"answer {i}" for i in range(TURNS)]
    assert [s["id"] for s in said[:2]] == [2, 4]  # positions in the transcript, as before
    recent = await view.recent("webhook:long", limit=4)
    assert recent is not None
    assert [m["content"] for m in recent["messages"]] == [
        f"question {TURNS - 2}", f"answer {TURNS - 2}", f"question {TURNS - 1}", f"answer {TURNS - 1}"]
    assert held(session) == 2  # reading did not load the prefix back into the session


def test_the_marker_cannot_be_written_to() -> None:
    """One marker stands for every archived message: a write to it would show up in all."""
    for write in (lambda: ARCHIVED.__setitem__("role", "user"), lambda: ARCHIVED.update(role="user"),
                  lambda: ARCHIVED.pop("_bytes")):
        try:
            write()
        except TypeError:
            continue
        raise AssertionError("the ARCHIVED marker accepted a write")
    assert ARCHIVED.get("role") is None and ARCHIVED["_bytes"] == 0
