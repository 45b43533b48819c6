"""Any file name the file system allows goes through memory versioning, recall and backup.

Git quotes names beyond printable ASCII in its human output; reading paths that way and
handing them back as pathspecs named no file, so one skill folder called 天气 stopped every
memory commit. These tests commit, log, diff and restore names in every script, with
quotes, spaces, leading dashes, glob characters and newlines (a property test generates
them), index and open them through the recall index, and carry them through a backup and
its restore. A name that is not UTF-8 at all is left out with a clear warning, never a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucidgate.config.onboard import install_templates
from lucidgate.config.schema import Config
from lucidgate.gateway.ops.backup import create_backup, restore_backup
from lucidgate.memory.commit_health import CommitHealth
from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.search import MemoryIndex, search
from lucidgate.memory.search.opening import open_lines

NAMED = ["天气", "café", "🐈 cat", 'say "hi"', "-rf", "--help", "a*b?[c]", ":(top)magic", "line\nbreak",
         "tab\there", "x" * 200, "über straße", "日記 2026"]


def git_names(workspace: Path, *args: str) -> list[str]:
    """Paths from git, read the only safe way (NUL-separated)."""
    out = subprocess.run(["git", "-C", str(workspace), *args, "-z"], check=True, capture_output=True).stdout
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def make_workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    install_templates(ws)
    return ws


def skill_file(ws: Path, name: str) -> Path:
    path = ws / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def round_trip(ws: Path, names: list[str]) -> None:
    """Commit, log, diff and restore the skill files ``names``; index and open their notes."""
    git = GitStore(ws)
    git.init()
    for n, name in enumerate(names):
        skill_file(ws, name).write_bytes(f"# {name}\nfirst version {n}\n".encode())
    first = git.commit_manual_edits()
    assert first is not None
    rels = {f"skills/{name}/SKILL.md" for name in names}
    assert rels <= set(git.log(1)[0].files)
    assert rels <= set(git_names(ws, "ls-files"))
    shown = git.diff(first)
    assert all(f"first version {n}" in shown for n in range(len(names)))

    for n, name in enumerate(names):
        skill_file(ws, name).write_bytes(f"# {name}\nsecond version {n}\n".encode())
    second = git.commit("agent: edit skills", [f"skills/{name}" for name in names])
    assert second is not None and rels == set(git.log(1)[0].files)
    git.restore(second)
    for n, name in enumerate(names):
        assert skill_file(ws, name).read_bytes() == f"# {name}\nfirst version {n}\n".encode()
    assert git.log(1)[0].message.startswith("restore: before ")
    assert CommitHealth(ws / "state" / "memory_commit.json").read().healthy

    for n, name in enumerate(names):  # a note beside the daily notes, found and opened by its name
        note = f"memory/{name}.md"
        (ws / note).write_text(f"# note\nzebrafinch{n} sings\n", encoding="utf-8")
    index = MemoryIndex(ws, embedder=None)
    index.sync()
    for n, name in enumerate(names):
        [hit] = search(index, f"zebrafinch{n}", k=1)
        assert hit.path == f"memory/{name}.md"
        assert f"zebrafinch{n} sings" in open_lines(ws, hit.path, 1, 5)
    index.close()


def backup_round_trip(ws: Path, root: Path, names: list[str]) -> None:
    config = Config.model_validate({"agents": {"defaults": {"workspace": str(ws)}}})
    archive = root / "backup.tar.gz"
    create_backup(config, root / "config.json", archive)
    restore_backup(archive, root / "restored")
    back = root / "restored" / "workspace"
    for name in names:
        assert skill_file(back, name).read_bytes() == skill_file(ws, name).read_bytes()
    assert GitStore(back).log(1)[0].message == GitStore(ws).log(1)[0].message


def test_named_files_round_trip_through_history_index_and_backup(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    round_trip(ws, NAMED)
    backup_round_trip(ws, tmp_path, NAMED)


def test_a_glob_in_a_name_is_not_a_pattern(tmp_path: Path) -> None:
    """Undoing a change to the skill named ``*`` leaves every other skill as it is."""
    ws = make_workspace(tmp_path)
    git = GitStore(ws)
    git.init()
    skill_file(ws, "*").write_text("star 1\n")
    skill_file(ws, "other").write_text("other 1\n")
    git.commit_manual_edits()
    skill_file(ws, "*").write_text("star 2\n")
    star = git.commit("agent: edit skills/*", ["skills/*"])
    assert star is not None and git.log(1)[0].files == ("skills/*/SKILL.md",)
    skill_file(ws, "other").write_text("other 2\n")
    git.commit_manual_edits()
    git.restore(star)
    assert skill_file(ws, "*").read_text() == "star 1\n"
    assert skill_file(ws, "other").read_text() == "other 2\n"


# Names a file system holds and git versions: no "/" or NUL, at most 255 bytes, not "." or "..";
# not git's own folder name (in any spelling git refuses) and not the ignored temp-file suffix.
_FORBIDDEN = {".", "..", ".git", "git~1"}
names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
                min_size=1, max_size=60).filter(
    lambda s: len(s.encode("utf-8")) <= 240 and s not in _FORBIDDEN
    and s.rstrip(" .").casefold() not in _FORBIDDEN and not s.endswith(".tmp") and s != "__pycache__")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(names, min_size=1, max_size=4, unique_by=lambda s: s.casefold()))
def test_generated_names_round_trip(picked: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = make_workspace(root)
        round_trip(ws, picked)
        backup_round_trip(ws, root, picked)


def test_a_name_that_is_not_utf8_is_left_out_with_a_warning_and_doctor_state(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ws = make_workspace(tmp_path)
    git = GitStore(ws)
    git.init()
    bad = os.fsdecode(b"caf\xe9")  # Latin-1 bytes, as an archive from another system may hold
    skill_file(ws, bad).write_text("foreign\n")
    skill_file(ws, "fine").write_text("fine\n")
    sha = git.commit_manual_edits()
    assert sha is not None and git.log(1)[0].files == ("skills/fine/SKILL.md",)
    assert "skills/caf\\xe9/SKILL.md" in caplog.text and "not valid UTF-8" in caplog.text
    state = CommitHealth(ws / "state" / "memory_commit.json").read()
    assert state.error is None and state.skipped == ("skills/caf\\xe9/SKILL.md",)
    assert git.commit_manual_edits() is None  # nothing else changed: no empty commit, no crash
    # The recall index skips a note it cannot name; the other notes are indexed.
    (ws / "memory" / f"{bad}.md").write_text("zebrafinch foreign\n")
    (ws / "memory" / "plain.md").write_text("zebrafinch plain\n")
    index = MemoryIndex(ws, embedder=None)
    index.sync()
    assert [h.path for h in search(index, "zebrafinch")] == ["memory/plain.md"]
    index.close()
    # Renamed, it is committed and the warning clears.
    (ws / "skills" / bad).rename(ws / "skills" / "café")
    git.commit_manual_edits()
    assert "skills/café/SKILL.md" in git.log(1)[0].files
    assert CommitHealth(ws / "state" / "memory_commit.json").read().healthy


def test_a_failed_commit_is_a_store_error_kept_until_one_succeeds(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    git = GitStore(ws)
    git.init()
    lock = ws / ".git" / "index.lock"
    lock.write_text("")  # a live git elsewhere (fresh, so not cleared as stale)
    (ws / "USER.md").write_text("# User\n- likes tea\n")
    with pytest.raises(GitStoreError, match=r"git add failed: .*index\.lock"):
        git.commit_manual_edits()
    state = json.loads((ws / "state" / "memory_commit.json").read_text())
    assert "index.lock" in state["error"] and state["failed_at"]
    lock.unlink()
    assert git.commit_manual_edits() is not None
    assert not (ws / "state" / "memory_commit.json").exists()


def test_a_name_git_reserves_is_left_out_and_the_rest_committed(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    git = GitStore(ws)
    git.init()
    for name in (".GIT", "git~1", "weather"):
        skill_file(ws, name).write_text(f"{name}\n")
    assert git.commit_manual_edits() is not None
    assert git.log(1)[0].files == ("skills/weather/SKILL.md",)
    assert CommitHealth(ws / "state" / "memory_commit.json").read().skipped == (
        "skills/.GIT/SKILL.md", "skills/git~1/SKILL.md")


async def test_the_console_lists_and_diffs_commits_of_unusual_names(make_config: Any, workspace: Path) -> None:
    from tests.console_kit import console_config, running_console, seed_workspace

    seed_workspace(workspace)
    quoted, spaced = 'skills/say "hi"/SKILL.md', "skills/a b/天气 notes.md"
    async with running_console(console_config(make_config)) as c:
        for rel in (quoted, spaced):
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_text("line one\u2028still line one\n", encoding="utf-8")
        sha = await c.parts.git.acommit_manual_edits()
        listed = (await c.client.get("/api/console/dream/commits")).json()
        detail = (await c.client.get(f"/api/console/dream/commits/{sha}")).json()
    assert set(listed[0]["files"]) == {quoted, spaced}
    assert {(f["path"], f["status"]) for f in detail["diff"]} == {(quoted, "added"), (spaced, "added")}
    for file in detail["diff"]:
        [hunk] = file["hunks"]
        assert [(x["op"], x["text"]) for x in hunk["lines"]] == [("+", "line one\u2028still line one")]


def test_export_then_import_carries_unusual_names_and_refuses_undecodable_ones(tmp_path: Path) -> None:
    from tests.test_import_lucid import machine, run

    ws_a, config_a = machine(tmp_path, "a")
    good = ["天气", 'say "hi"', "-rf", "🐈 cat"]
    for name in good:
        skill_file(ws_a, name).write_text(f"# {name}\n", encoding="utf-8")
    skill_file(ws_a, os.fsdecode(b"caf\xe9")).write_text("foreign\n")
    GitStore(ws_a).commit_manual_edits()
    archive = tmp_path / "assistant.tar.gz"
    run(["export", "--out", str(archive), "-c", str(config_a)])

    ws_b, config_b = machine(tmp_path, "b")
    shown = run(["import", "lucid", str(archive), "-c", str(config_b)])
    for name in good:
        assert skill_file(ws_b, name).read_bytes() == skill_file(ws_a, name).read_bytes()
    assert "caf\\xe9" in shown and "not UTF-8 text" in shown
    assert not (ws_b / "skills" / os.fsdecode(b"caf\xe9")).exists()
    assert [c.message for c in GitStore(ws_b).log(5)] == [c.message for c in GitStore(ws_a).log(5)]


def test_skills_are_discovered_under_any_name_and_an_undecodable_folder_is_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from lucidgate.gateway.skills.catalog import SkillsLoader

    ws = make_workspace(tmp_path)
    for name in ("天气", 'say "hi"', "-rf"):
        skill_file(ws, name).write_text(f"---\ndescription: about {name}\n---\nbody\n", encoding="utf-8")
    skill_file(ws, os.fsdecode(b"caf\xe9")).write_text("---\ndescription: foreign\n---\n")
    found = {s.name: s for s in SkillsLoader(ws, builtin_dir=tmp_path / "none").load()}
    assert set(found) == {"天气", 'say "hi"', "-rf"}
    assert found["天气"].description == "about 天气"
    assert "caf\\xe9" in caplog.text and "not UTF-8" in caplog.text
    json.dumps([s.name for s in found.values()], ensure_ascii=False).encode("utf-8")  # a prompt can carry them


async def test_a_tool_result_naming_an_undecodable_file_is_text_the_transcript_can_hold(tmp_path: Path) -> None:
    from lucidgate.gateway.tools.base import ToolRegistry
    from lucidgate.gateway.tools.files import ListDir
    from lucidgate.memory.sessions import SessionStore
    from tests.fakes.context import make_ctx

    ws = make_workspace(tmp_path)
    skill_file(ws, os.fsdecode(b"caf\xe9")).write_text("foreign\n")
    skill_file(ws, "天气").write_text("晴\n")
    listed = await ToolRegistry([ListDir()]).execute(make_ctx(ws), "list_dir", {"path": "skills"})
    assert not listed.failed and "caf\\xe9/" in listed and "天气/" in listed
    store = SessionStore(ws / "sessions")
    session = await store.get("cli:1")
    await store.append(session, {"role": "tool", "tool_call_id": "t1", "name": "list_dir", "content": str(listed)})
    assert "caf\\\\xe9/" in (ws / "sessions" / "cli_1.jsonl").read_text(encoding="utf-8")


async def test_forget_removes_the_lines_even_when_the_commit_fails(tmp_path: Path) -> None:
    from lucidgate.memory.forget import forget
    from lucidgate.memory.store import MemoryStore

    ws = make_workspace(tmp_path)
    (ws / "USER.md").write_text("# User\n- drinks green tea\n- lives in Porto\n")
    git = GitStore(ws)
    git.init()
    (ws / ".git" / "index.lock").write_text("")  # another git holds the index
    report = await forget(MemoryStore(ws), git, "green tea")
    assert report.removed == ["- drinks green tea"] and report.commit is None
    assert "green tea" not in (ws / "USER.md").read_text()
    assert "index.lock" in (CommitHealth(ws / "state" / "memory_commit.json").read().error or "")
