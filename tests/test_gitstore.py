"""GitStore (DESIGN §3, §4.3, §5.3) and ``forget``: versioning only the memory files."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.forget import forget
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.store import MemoryStore


def git(workspace: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(workspace), *args], check=True,
                          capture_output=True, text=True).stdout


def tracked(workspace: Path) -> list[str]:
    return sorted(git(workspace, "ls-files").split())


@pytest.fixture
def ws(workspace: Path) -> Path:
    """A workspace with memory files plus things that must never be versioned."""
    (workspace / "memory").mkdir()
    (workspace / "sessions").mkdir()
    (workspace / "SOUL.md").write_text("# Soul\nCalm.\n")
    (workspace / "USER.md").write_text("# User\n- Name: Ana\n- Drinks tea\n")
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n- Project uses Python\n")
    (workspace / "memory" / "history.jsonl").write_text('{"cursor": 1}\n')
    (workspace / "memory" / ".cursor").write_text("1\n")
    (workspace / "sessions" / "telegram_1.jsonl").write_text("{}\n")
    (workspace / "AGENTS.md").write_text("# Agents\n")
    (workspace / "config.json").write_text('{"secret": "x"}\n')
    return workspace


def test_init_tracks_only_the_memory_files(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    store.init()  # idempotent
    log = store.log()
    assert [c.message for c in log] == ["init: memory files"]
    assert tracked(ws) == ["SOUL.md", "USER.md", "memory/MEMORY.md"]
    assert set(log[0].files) == {"SOUL.md", "USER.md", "memory/MEMORY.md"}
    # A `git add -A` by hand still picks up nothing else: the .gitignore covers it.
    assert git(ws, "add", "-A", "--dry-run") == ""
    assert "/*" in (ws / ".gitignore").read_text()
    # No global identity exists in the test HOME, yet commits carry ours.
    assert git(ws, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == \
        "lucidgate <lucidgate@localhost>|lucidgate <lucidgate@localhost>"


def test_commit_log_and_diff(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    assert store.commit("dream: nothing") is None  # nothing changed
    (ws / "USER.md").write_text("# User\n- Name: Ana\n- Drinks coffee\n")
    (ws / "skills" / "weekly-report").mkdir(parents=True)
    (ws / "skills" / "weekly-report" / "SKILL.md").write_text("---\nname: weekly-report\n---\n")
    (ws / "sessions" / "telegram_1.jsonl").write_text("{}\n{}\n")  # never versioned
    sha = store.commit("dream: 2026-01-01 10:00, 2 change(s)")
    assert sha is not None and len(sha) == 40
    newest = store.log(1)[0]
    assert (newest.sha, newest.short) == (sha, sha[:len(newest.short)])
    assert newest.message == "dream: 2026-01-01 10:00, 2 change(s)"
    assert set(newest.files) == {"USER.md", "skills/weekly-report/SKILL.md"}
    assert newest.when.tzinfo is not None
    patch = store.diff(sha[:8])
    assert "-- Drinks tea" in patch and "+- Drinks coffee" in patch
    assert "skills/weekly-report/SKILL.md" in patch
    assert [c.message for c in store.log(prefix="dream:")] == [newest.message]
    assert len(store.log(n=1)) == 1


def test_manual_edits_are_committed_separately(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    assert store.commit_manual_edits() is None
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n- Project uses Python 3.11\n")
    (ws / "SOUL.md").unlink()  # a deletion is an edit too
    sha = store.commit_manual_edits()
    assert sha is not None
    info = store.log(1)[0]
    assert info.message == "manual: SOUL.md, memory/MEMORY.md"
    assert "SOUL.md" not in tracked(ws)


def test_restore_brings_back_the_state_before_a_commit(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    (ws / "USER.md").write_text("# User\n- Name: Ana\n- Drinks coffee\n")
    (ws / "skills" / "x").mkdir(parents=True)
    (ws / "skills" / "x" / "SKILL.md").write_text("---\nname: x\n---\n")
    bad = store.commit("dream: bad")
    assert bad is not None
    (ws / "USER.md").write_text("# User\n- Name: Ana\n- Drinks coffee\n- Hand edit\n")  # unsaved edit
    new = store.restore(bad[:10])
    assert (ws / "USER.md").read_text() == "# User\n- Name: Ana\n- Drinks tea\n"
    assert not (ws / "skills" / "x" / "SKILL.md").exists()
    messages = [c.message for c in store.log()]
    assert messages == [f"restore: before {bad[:8]}", "manual: USER.md", "dream: bad",
                        "init: memory files"]
    assert store.log(1)[0].sha == new
    # The hand edit is not lost: it is in history and can itself be restored.
    manual = store.log()[1].sha
    assert "+- Hand edit" in store.diff(manual)
    with pytest.raises(GitStoreError, match="already match"):
        store.restore(bad)


def test_restore_touches_only_what_the_commit_changed(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    (ws / "USER.md").write_text("# User\n- Name: Ana\n- Drinks coffee\n")
    bad = store.commit("dream: bad")
    assert bad is not None
    (ws / "skills" / "later").mkdir(parents=True)
    (ws / "skills" / "later" / "SKILL.md").write_text("---\nname: later\n---\n")
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n- a later fact\n")
    assert store.commit("dream: later") is not None
    store.restore(bad)
    assert (ws / "USER.md").read_text() == "# User\n- Name: Ana\n- Drinks tea\n"
    assert (ws / "skills" / "later" / "SKILL.md").exists()  # added after: kept
    assert "a later fact" in (ws / "memory" / "MEMORY.md").read_text()
    assert store.log(1)[0].files == ("USER.md",)


@pytest.mark.parametrize("sha", ["deadbeef", "--output=/tmp/pwned", "HEAD", "", "zz"])
def test_restore_and_diff_refuse_unknown_commits(ws: Path, sha: str) -> None:
    store = GitStore(ws)
    store.init()
    before = store.log()
    with pytest.raises(GitStoreError, match="commit"):
        store.restore(sha)
    with pytest.raises(GitStoreError, match="commit"):
        store.diff(sha)
    assert store.log() == before
    assert not Path("/tmp/pwned").exists()


def test_restore_of_the_first_commit_is_refused(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    with pytest.raises(GitStoreError, match="first commit"):
        store.restore(store.log()[0].sha)


def test_missing_repo_is_reinitialised(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    shutil.rmtree(ws / ".git")
    assert store.log() == []
    (ws / "USER.md").write_text("# User\n- New\n")
    assert store.commit_manual_edits() is None  # the fresh init commit already holds the file
    assert [c.message for c in store.log()] == ["init: memory files"]
    assert tracked(ws) == ["SOUL.md", "USER.md", "memory/MEMORY.md"]
    assert git(ws, "show", "HEAD:USER.md") == "# User\n- New\n"


def test_broken_repo_is_moved_aside_and_recreated(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    shutil.rmtree(ws / ".git")
    (ws / ".git").write_text("gitdir: /nowhere\n")
    (ws / "USER.md").write_text("# User\n- After\n")
    store.commit("dream: x")
    assert [c.message for c in store.log()] == ["init: memory files"]
    assert any(p.name.startswith(".git.broken-") for p in ws.iterdir())


def test_dirty_index_commits_only_the_memory_files(ws: Path) -> None:
    store = GitStore(ws)
    store.init()
    # Someone force-staged a session and half-staged a USER.md edit by hand.
    git(ws, "add", "-f", "sessions/telegram_1.jsonl")
    (ws / "USER.md").write_text("# User\n- Name: Ana\n- Staged line\n")
    git(ws, "add", "USER.md")
    (ws / "USER.md").write_text("# User\n- Name: Ana\n- Staged line\n- Unstaged line\n")
    sha = store.commit("dream: y")
    assert sha is not None
    assert store.log(1)[0].files == ("USER.md",)
    assert git(ws, "show", "HEAD:USER.md").endswith("- Unstaged line\n")  # the work tree wins
    assert "sessions/telegram_1.jsonl" not in git(ws, "ls-tree", "-r", "--name-only", "HEAD")


def test_corrupt_index_and_stale_index_lock_are_recovered(
        ws: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = GitStore(ws)
    store.init()
    (ws / ".git" / "index").write_bytes(b"garbage, not an index")
    (ws / "USER.md").write_text("# User\n- After corruption\n")
    with caplog.at_level("WARNING"):
        assert store.commit("dream: a") is not None
    assert "corrupt" in caplog.text
    assert store.log(1)[0].files == ("USER.md",)  # the rebuilt index did not lose the others
    assert tracked(ws) == ["SOUL.md", "USER.md", "memory/MEMORY.md"]
    lock = ws / ".git" / "index.lock"
    lock.write_text("")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    (ws / "USER.md").write_text("# User\n- After a crashed git\n")
    assert store.commit("dream: b") is not None
    assert not lock.exists()
    assert [c.message for c in store.log(2)] == ["dream: b", "dream: a"]


def test_a_held_git_lock_gives_a_clear_error(ws: Path) -> None:
    store = GitStore(ws, lock_timeout_s=0.2)
    store.init()
    holder = FileLock(ws / "memory" / ".git.lock")
    (ws / "USER.md").write_text("# User\n- Waiting\n")
    result: dict[str, object] = {}

    def other_thread() -> None:
        # A different thread plays the other process: it holds the lock throughout.
        with holder:
            try:
                store.commit("dream: blocked")
            except GitStoreError as exc:
                result["error"] = str(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert "stayed locked" in str(result.get("error"))
    assert [c.message for c in store.log(1)] == ["init: memory files"]
    assert store.commit("dream: later") is not None  # works once the lock is free


async def test_async_wrappers(ws: Path) -> None:
    store = GitStore(ws)
    await store.ainit()
    (ws / "USER.md").write_text("# User\n- async\n")
    assert await store.acommit_manual_edits() is not None
    (ws / "USER.md").write_text("# User\n- async 2\n")
    sha = await store.acommit("dream: async")
    assert sha and "+- async 2" in await store.adiff(sha)
    assert [c.message for c in await store.alog(2)] == ["dream: async", "manual: USER.md"]
    await store.arestore(sha)
    assert (ws / "USER.md").read_text() == "# User\n- async\n"


# ----------------------------------------------------------------------------- forget

async def test_forget_removes_matching_lines_and_commits(ws: Path) -> None:
    store, repo = MemoryStore(ws), GitStore(ws)
    await repo.ainit()
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n- Ana's TEA shop idea\n- Project uses Python\n")
    report = await forget(store, repo, "tea", confirm=True, by="the owner")  # short: confirmed
    assert report.removed == ["- Ana's TEA shop idea", "- Drinks tea"]
    assert report.files == {"memory/MEMORY.md": 1, "USER.md": 1}
    assert (ws / "USER.md").read_text() == "# User\n- Name: Ana\n"
    assert (ws / "memory" / "MEMORY.md").read_text() == "# Memory\n- Project uses Python\n"
    messages = [c.message for c in repo.log()]
    assert messages[:2] == [f"forget: [{report.tombstone}] (asked by the owner)", "manual: memory/MEMORY.md"]
    assert "tea" not in messages[0].lower()  # the commit message does not repeat the text
    assert set(repo.log(1)[0].files) == {"USER.md", "memory/MEMORY.md"}


async def test_forget_keeps_headings_and_refuses_empty_text(ws: Path) -> None:
    store, repo = MemoryStore(ws), GitStore(ws)
    await repo.ainit()
    report = await forget(store, repo, "user", confirm=True)  # only the "# User" heading matches
    assert report.removed == ["# User"]
    assert (ws / "USER.md").read_text().startswith("# [forgotten]\n- Name: Ana\n")  # its place kept
    report = await forget(store, repo, "nothing like this")
    assert not report.found and report.files == {}
    assert [c.message for c in repo.log()][1:] == ["init: memory files"]
    with pytest.raises(ValueError):
        await forget(store, repo, "   ")


def test_a_start_with_unchanged_memory_files_runs_no_git(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = GitStore(ws)
    store.init()
    memory = ws / "memory" / "MEMORY.md"
    past = time.time() - 60
    for path in (ws / "SOUL.md", ws / "USER.md", memory):  # not "racy": older than the clock's tick
        os.utime(path, (past, past))
    assert store.commit_manual_edits() is None  # the full check, which leaves the stamp

    def no_git(*args: object, **kwargs: object) -> None:
        raise AssertionError("git was opened although no memory file changed")

    with monkeypatch.context() as patched:
        patched.setattr(GitStore, "_repo", no_git)
        store.init()
        assert store.commit_manual_edits() is None
    # A same-size hand edit (only its time differs) is still seen and committed.
    memory.write_text(memory.read_text().replace("Python", "Pythan"))
    os.utime(memory, (past - 60, past - 60))
    sha = store.commit_manual_edits()
    assert sha is not None and "Pythan" in git(ws, "show", "HEAD:memory/MEMORY.md")
    # A commit made by someone else (the refs move: e.g. a history taken from a backup) also
    # ends the shortcut, though the files look the same.
    os.utime(memory, (past, past))
    assert store.commit_manual_edits() is None
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "by hand")
    with monkeypatch.context() as patched:
        patched.setattr(GitStore, "_repo", no_git)
        with pytest.raises(AssertionError, match="git was opened"):
            store.commit_manual_edits()
