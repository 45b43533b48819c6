"""The file tools (read_file, write_file, edit_file, list_dir, grep) through a real registry."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lucidgate.config import Config
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.builtin import builtin_tools
from lucidgate.gateway.tools.files import ReadFile
from lucidgate.gateway.tools.turn import TurnContext
from tests.fakes.context import make_ctx


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("outside secret\n")
    return folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "todo.md").write_text("# Todo\n- buy milk\n- call Alice\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return 42\n\n\ndef helper():\n    return 'x'\n")
    (root / "sessions").mkdir()
    (root / "sessions" / "telegram_42.jsonl").write_text('{"_type":"metadata","note":"private chat"}\n')
    (root / "inbox.jsonl").write_text('{"id":"1","msg":{"text":"private inbox"}}\n')
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\nprivate git config\n")
    (root / "state").mkdir()
    (root / "state" / "pairing.json").write_text('{"codes": {"private-code": "telegram:7"}}\n')
    (root / "inbox.cli.jsonl").write_text('{"id":"2","msg":{"text":"private cli inbox"}}\n')
    (root / "usage").mkdir()
    (root / "usage" / "2026-04-03.jsonl").write_text('{"tokens": 12}\n')
    (root / "memory").mkdir()
    (root / "memory" / "history.jsonl").write_text('{"cursor":1,"content":"- fact"}\n')
    return root


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(builtin_tools(Config()))


@pytest.fixture
def owner(ws: Path) -> TurnContext:
    return make_ctx(ws)


async def call(registry: ToolRegistry, ctx: TurnContext, name: str, **arguments: object) -> str:
    return await registry.execute(ctx, name, json.dumps(arguments))


# ------------------------------------------------------------------------- read_file


async def test_read_file_numbers_lines(registry: ToolRegistry, owner: TurnContext) -> None:
    out = await call(registry, owner, "read_file", path="notes/todo.md")
    assert out.splitlines() == ["     1\t# Todo", "     2\t- buy milk", "     3\t- call Alice"]


async def test_read_file_offset_and_limit_page_a_big_file(registry, owner, ws) -> None:
    (ws / "big.txt").write_text("".join(f"row {i}\n" for i in range(1, 5001)))
    roomy = ReadFile(max_chars=1_000_000)  # so the 2000-line default, not the char cap, applies
    first = await roomy.run(owner, ReadFile.Params(path="big.txt"))
    lines = first.splitlines()
    assert lines[0] == "     1\trow 1" and lines[1999] == "  2000\trow 2000"
    assert lines[-1] == "[big.txt: lines 1-2000 of 5000; continue with offset=2001]"
    page = await call(registry, owner, "read_file", path="big.txt", offset=4998, limit=10)
    assert page.splitlines() == ["  4998\trow 4998", "  4999\trow 4999", "  5000\trow 5000",
                                 "[big.txt: lines 4998-5000 of 5000]"]
    past = await call(registry, owner, "read_file", path="big.txt", offset=6000)
    assert past.startswith("Error:") and "5000 lines" in past


async def test_read_file_char_cap_ends_with_a_continuation_hint(ws, owner) -> None:
    (ws / "wide.txt").write_text("".join(f"{i} " + "x" * 100 + "\n" for i in range(1, 301)))
    tool = ReadFile(max_chars=2000)
    out = await tool.run(owner, ReadFile.Params(path="wide.txt"))
    assert len(out) <= 2000
    footer = out.splitlines()[-1]
    assert footer.startswith("[wide.txt: lines 1-") and "of 300; continue with offset=" in footer
    next_offset = int(footer.rsplit("=", 1)[1].rstrip("]"))
    assert f"\t{next_offset - 1} x" in out and f"\t{next_offset} x" not in out


async def test_read_file_refuses_binary_directory_and_missing(registry, owner, ws) -> None:
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    binary = await call(registry, owner, "read_file", path="image.png")
    assert binary.startswith("Error:") and "binary" in binary
    folder = await call(registry, owner, "read_file", path="notes")
    assert folder.startswith("Error:") and "directory" in folder and "list_dir" in folder
    missing = await call(registry, owner, "read_file", path="nope.md")
    assert missing.startswith("Error:") and "does not exist" in missing
    empty = (ws / "empty.txt")
    empty.write_text("")
    assert "empty" in await call(registry, owner, "read_file", path="empty.txt")


# ------------------------------------------------------------------------ write_file


async def test_write_file_creates_folders_atomically_and_reports_bytes(registry, owner, ws) -> None:
    out = await call(registry, owner, "write_file", path="deep/er/new.md", content="héllo\n")
    assert out == "Created deep/er/new.md (7 bytes)"
    assert (ws / "deep" / "er" / "new.md").read_text(encoding="utf-8") == "héllo\n"
    assert [p.name for p in (ws / "deep" / "er").iterdir()] == ["new.md"]  # no temp file left
    mode = stat.S_IMODE((ws / "deep" / "er" / "new.md").stat().st_mode)
    assert mode & 0o644 == 0o644  # not mkstemp's private 0600

    script = ws / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    again = await call(registry, owner, "write_file", path="run.sh", content="#!/bin/sh\n")
    assert again.startswith("Overwrote run.sh")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert (await call(registry, owner, "write_file", path="notes", content="x")).startswith("Error:")


# ------------------------------------------------------------------------- edit_file


async def test_edit_file_unique_match(registry, owner, ws) -> None:
    out = await call(registry, owner, "edit_file", path="notes/todo.md",
                     old_text="- buy milk", new_text="- buy oat milk")
    assert out == "Edited notes/todo.md: replaced 1 occurrence"
    assert (ws / "notes" / "todo.md").read_text() == "# Todo\n- buy oat milk\n- call Alice\n"


async def test_edit_file_ambiguous_needs_context_or_replace_all(registry, owner, ws) -> None:
    before = (ws / "src" / "app.py").read_text()
    out = await call(registry, owner, "edit_file", path="src/app.py",
                     old_text="    return", new_text="    yield")
    assert out.startswith("Error:") and "2 times" in out and "lines 2, 6" in out
    assert (ws / "src" / "app.py").read_text() == before
    out = await call(registry, owner, "edit_file", path="src/app.py",
                     old_text="    return", new_text="    yield", replace_all=True)
    assert out == "Edited src/app.py: replaced 2 occurrences"
    assert (ws / "src" / "app.py").read_text().count("    yield") == 2


async def test_edit_file_miss_shows_closest_region_as_diff(registry, owner, ws) -> None:
    before = (ws / "src" / "app.py").read_text()
    out = await call(registry, owner, "edit_file", path="src/app.py",
                     old_text="def helper():\n    return 'y'", new_text="def helper():\n    return 'z'")
    assert out.startswith("Error: old_text was not found in src/app.py")
    assert "Closest region is lines 5-6" in out
    assert "--- old_text" in out and "+++ src/app.py lines 5-6" in out
    assert "-    return 'y'" in out and "+    return 'x'" in out  # the file's real line
    assert (ws / "src" / "app.py").read_text() == before


async def test_edit_file_miss_flags_whitespace_only_difference(registry, owner) -> None:
    out = await call(registry, owner, "edit_file", path="src/app.py",
                     old_text="def main():\n  return 42", new_text="def main():\n  return 43")
    assert "differ only in whitespace" in out and "+    return 42" in out


async def test_edit_file_refuses_noop_and_unrelated_text(registry, owner, ws) -> None:
    noop = await call(registry, owner, "edit_file", path="notes/todo.md",
                      old_text="- buy milk", new_text="- buy milk")
    assert noop.startswith("Error:") and "identical" in noop
    unrelated = await call(registry, owner, "edit_file", path="notes/todo.md",
                           old_text="zzzz qqqq 1234567", new_text="x")
    assert unrelated.startswith("Error:") and "Nothing in it resembles" in unrelated
    empty = await call(registry, owner, "edit_file", path="notes/todo.md", old_text="", new_text="x")
    assert empty.startswith("Error: invalid arguments")


async def test_edit_file_keeps_crlf_and_refuses_invalid_utf8(registry, owner, ws) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = await call(registry, owner, "edit_file", path="win.txt", old_text="one\ntwo", new_text="1\n2")
    assert out.startswith("Edited")
    assert (ws / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"
    (ws / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    bad = await call(registry, owner, "edit_file", path="latin1.txt", old_text="au", new_text="with")
    assert bad.startswith("Error:") and "UTF-8" in bad
    assert (ws / "latin1.txt").read_bytes() == "caf\xe9 au lait\n".encode("latin-1")


# -------------------------------------------------------------------------- list_dir


async def test_list_dir_marks_folders_sizes_and_hides_git(registry, owner, ws) -> None:
    out = await call(registry, owner, "list_dir")
    lines = out.splitlines()
    assert "notes/" in lines and "src/" in lines and "sessions/" in lines
    assert f"inbox.jsonl  {(ws / 'inbox.jsonl').stat().st_size} B" in lines
    assert not any(".git" in line for line in lines)
    deep = await call(registry, owner, "list_dir", path="src", depth=2)
    assert deep.splitlines() == [f"app.py  {(ws / 'src' / 'app.py').stat().st_size} B"]
    nested = await call(registry, owner, "list_dir", path=".", depth=2)
    assert f"  todo.md  {(ws / 'notes' / 'todo.md').stat().st_size} B" in nested.splitlines()
    assert (await call(registry, owner, "list_dir", path="notes/todo.md")).startswith("Error:")


async def test_list_dir_is_bounded(registry, owner, ws) -> None:
    many = ws / "many"
    many.mkdir()
    for i in range(250):
        (many / f"f{i:03}.txt").write_text("x")
    out = await call(registry, owner, "list_dir", path="many")
    lines = out.splitlines()
    assert len(lines) == 201 and lines[-1].startswith("[stopped at 200 entries")


# ------------------------------------------------------------------------------ grep


async def test_grep_regex_glob_and_case(registry, owner, ws) -> None:
    out = await call(registry, owner, "grep", pattern=r"def \w+\(\)")
    assert out.splitlines() == ["src/app.py:1: def main():", "src/app.py:5: def helper():"]
    md_only = await call(registry, owner, "grep", pattern="(milk|def)", glob="*.md")
    assert md_only.splitlines() == ["notes/todo.md:2: - buy milk"]
    assert (await call(registry, owner, "grep", pattern="ALICE")).startswith("No matches")
    assert await call(registry, owner, "grep", pattern="ALICE", ignore_case=True) == \
        "notes/todo.md:3: - call Alice"
    in_file = await call(registry, owner, "grep", pattern="return", path="src/app.py")
    assert len(in_file.splitlines()) == 2
    bad = await call(registry, owner, "grep", pattern="(unclosed")
    assert bad.startswith("Error: invalid regex")


async def test_grep_skips_binary_git_and_internal_files(registry, owner, ws) -> None:
    (ws / "blob.bin").write_bytes(b"private\x00binary")
    out = await call(registry, owner, "grep", pattern="private")
    assert out.startswith("No matches")  # .git/config, sessions, inbox, blob.bin all skipped


async def test_grep_results_are_bounded(registry, owner, ws) -> None:
    (ws / "log.txt").write_text("".join(f"hit {i}\n" for i in range(500)))
    out = await call(registry, owner, "grep", pattern="hit")
    lines = out.splitlines()
    assert len(lines) == 101 and lines[-1].startswith("[showing the first 100 matches")


# ------------------------------------------------------------------------ confinement


@pytest.mark.parametrize("path", ["../outside/secret.txt", "notes/../../outside/secret.txt", "/etc/passwd",
                                  "~/.bashrc"])
async def test_escapes_are_refused_for_every_file_tool(registry, owner, outside, path) -> None:
    for name, args in [("read_file", {}), ("list_dir", {}), ("grep", {"pattern": "x"}),
                       ("edit_file", {"old_text": "a", "new_text": "b"}),
                       ("write_file", {"content": "pwned"})]:
        out = await call(registry, owner, name, path=path, **args)
        assert out.startswith("Error:") and "outside the workspace" in out, (name, out)
    assert (outside / "secret.txt").read_text() == "outside secret\n"


async def test_write_escape_creates_nothing_outside(registry, owner, tmp_path) -> None:
    out = await call(registry, owner, "write_file", path="../escaped.txt", content="x")
    assert out.startswith("Error:")
    assert not (tmp_path / "escaped.txt").exists()


async def test_symlinks_pointing_out_are_refused(registry, owner, ws, outside) -> None:
    (ws / "etc").symlink_to("/etc")
    (ws / "linked").symlink_to(outside, target_is_directory=True)
    (ws / "secret_link.txt").symlink_to(outside / "secret.txt")
    for path in ["etc/passwd", "linked/secret.txt", "secret_link.txt", "linked"]:
        out = await call(registry, owner, "read_file", path=path)
        assert out.startswith("Error:") and "outside the workspace" in out, (path, out)
    write = await call(registry, owner, "write_file", path="linked/new.txt", content="x")
    assert write.startswith("Error:") and not (outside / "new.txt").exists()
    edit = await call(registry, owner, "edit_file", path="secret_link.txt", old_text="outside", new_text="in")
    assert edit.startswith("Error:") and (outside / "secret.txt").read_text() == "outside secret\n"
    assert (await call(registry, owner, "list_dir", path="linked")).startswith("Error:")
    grep = await call(registry, owner, "grep", pattern="secret")
    assert grep.startswith("No matches")  # walking never follows links out
    listing = await call(registry, owner, "list_dir")
    assert f"linked -> {outside}" in listing


async def test_absolute_path_inside_workspace_and_inner_symlink_are_allowed(registry, owner, ws) -> None:
    out = await call(registry, owner, "read_file", path=str(ws / "notes" / "todo.md"))
    assert "buy milk" in out
    (ws / "todo_link.md").symlink_to(ws / "notes" / "todo.md")
    assert "buy milk" in await call(registry, owner, "read_file", path="todo_link.md")


@pytest.mark.parametrize("path", ["sessions/telegram_42.jsonl", "inbox.jsonl", ".git/config",
                                  "notes/../sessions/telegram_42.jsonl", "inbox.cli.jsonl",
                                  "state/pairing.json"])
async def test_internal_state_is_refused_for_everyone(registry, owner, ws, path) -> None:
    before = (ws / path).read_bytes()
    for name, args in [("read_file", {}), ("write_file", {"content": "x"}),
                       ("edit_file", {"old_text": "private", "new_text": "public"})]:
        out = await call(registry, owner, name, path=path, **args)
        assert out.startswith("Error:") and "internal gateway state" in out, (name, out)
    assert (ws / path).read_bytes() == before
    (ws / "sneaky").symlink_to(ws / ".git")
    sneaky = await call(registry, owner, "read_file", path="sneaky/config")
    assert sneaky.startswith("Error:") and "internal" in sneaky


async def test_memory_pipeline_files_are_neither_readable_nor_writable(registry, owner, ws) -> None:
    # History is found with memory_search (scoped by chat), never read raw: it mixes chats.
    read = await call(registry, owner, "read_file", path="memory/history.jsonl")
    assert read.startswith("Error:") and "memory_search" in read and "fact" not in read
    out = await call(registry, owner, "write_file", path="memory/history.jsonl", content="")
    assert out.startswith("Error:") and "memory pipeline" in out
    assert "fact" in (ws / "memory" / "history.jsonl").read_text()
    assert "tokens" in await call(registry, owner, "read_file", path="usage/2026-04-03.jsonl")
    ledger = await call(registry, owner, "edit_file", path="usage/2026-04-03.jsonl",
                        old_text="12", new_text="0")
    assert ledger.startswith("Error:") and "usage ledger" in ledger


async def test_unrestricted_tools_reach_outside_but_not_internal_state(ws, outside) -> None:
    config = Config.model_validate({"tools": {"restrictToWorkspace": False}})
    registry = ToolRegistry(builtin_tools(config))
    owner = make_ctx(ws)
    assert "outside secret" in await call(registry, owner, "read_file", path=str(outside / "secret.txt"))
    assert "outside secret" in await call(registry, owner, "read_file", path="../outside/secret.txt")
    inbox = await call(registry, owner, "read_file", path="inbox.jsonl")
    assert inbox.startswith("Error:") and "internal" in inbox


# ---------------------------------------------------------------- roles and arguments


async def test_guest_gets_no_file_tools_by_default(registry, ws) -> None:
    guest = make_ctx(ws, role="guest")
    assert registry.schemas(guest) == []
    for name in ["read_file", "write_file", "edit_file", "list_dir", "grep"]:
        out = await call(registry, guest, name, path="notes/todo.md", content="x", pattern="x",
                         old_text="a", new_text="b")
        assert out.startswith("Error:") and "not available" in out
    assert (ws / "notes" / "todo.md").read_text().startswith("# Todo")


async def test_malformed_arguments_are_errors_for_the_model(registry, owner) -> None:
    broken = await registry.execute(owner, "read_file", '{"path": "notes/todo.md"')
    assert broken.startswith("Error: invalid arguments for read_file") and "JSON" in broken
    unknown = await registry.execute(owner, "read_file", '{"path": "notes/todo.md", "mode": "rb"}')
    assert unknown.startswith("Error: invalid arguments") and "mode" in unknown
    missing = await registry.execute(owner, "write_file", '{"path": "a.txt"}')
    assert missing.startswith("Error: invalid arguments") and "content" in missing
    wrong_type = await registry.execute(owner, "read_file", '{"path": "notes/todo.md", "offset": 0}')
    assert wrong_type.startswith("Error: invalid arguments") and "offset" in wrong_type
    empty = await call(registry, owner, "read_file", path="  ")
    assert empty.startswith("Error:") and "empty" in empty


def test_builtin_tools_follow_config_and_stay_small() -> None:
    from lucidgate.memory.tokens import count_text

    config = Config.model_validate({"tools": {"restrictToWorkspace": False,
                                              "exec": {"timeoutS": 5, "maxOutputChars": 500}}})
    tools = {tool.name: tool for tool in builtin_tools(config)}
    assert list(tools) == ["read_file", "write_file", "edit_file", "list_dir", "grep", "exec"]
    assert all(getattr(t, "restrict", False) is False for n, t in tools.items() if n != "exec")
    assert tools["exec"].timeout_s == 5 and tools["exec"].max_output_chars == 500
    assert tools["exec"].owner_only and not any(t.owner_only for n, t in tools.items() if n != "exec")
    owner = make_ctx(Path(os.sep), role="owner")
    schemas = ToolRegistry(builtin_tools(Config())).schemas(owner)
    assert count_text(json.dumps(schemas)) < 700
