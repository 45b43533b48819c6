"""Item 5: git control files are the owner's, and memory git ignores attributes in the tree.

Over real HTTP, a webhook guest whose owner granted ``write_file`` and ``edit_file`` is told by
the model to write ``.gitattributes`` (``working-tree-encoding=UTF-16LE``), ``.gitmodules`` and
``.mailmap``, at the root and in other folders, in any case: every write is refused and nothing
lands. Then, with the issue's ``.gitattributes`` planted in the workspace anyway (an import, a
hand copy), the real ``lucid memory`` commands keep memory plain: the committed MEMORY.md is
UTF-8, its diff is text, and a restore writes it back as UTF-8.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lucidgate.memory.gitstore import GitStore
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls, message_text
from tests.security._trust1_kit import LUCID, cli_env, guest_post, hook_document, load, serving

UTF16 = "* working-tree-encoding=UTF-16LE\n"
CONTROL_FILES = [".gitattributes", ".GitAttributes", "notes/.gitattributes", "deep/er/.GITATTRIBUTES",
                 ".gitmodules", "notes/.gitmodules", ".mailmap", "notes/.MailMap", "notes/.gitignore"]


async def test_a_guest_granted_write_file_cannot_write_git_control_files(
        fake_llm: FakeLLMServer, tmp_path: Path, workspace: Path) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "todo.md").write_text("- buy milk\n")
    config = load(hook_document(workspace, fake_llm.base_url, guestTools=["read_file", "write_file", "edit_file"]),
                  tmp_path / "config.json")
    calls = [("write_file", {"path": p, "content": UTF16}) for p in CONTROL_FILES]
    calls.append(("write_file", {"path": "notes/guest.md", "content": "allowed"}))  # the control
    fake_llm.queue(ToolCalls(calls), Reply("done"))
    async with serving(config) as (server, client):
        r = await client.post("/v1/messages", json=guest_post("g5", "mallory", "tidy the repository"))
        assert r.status_code == 200, r.text
        await server.state.gateway.parts.agent.idle()
    results = [message_text(m) for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == len(calls)
    for path, result in zip(CONTROL_FILES, results, strict=False):
        assert result.startswith("Error:") and "owner-only" in result, (path, result)
    assert not results[-1].startswith("Error"), results[-1]
    planted = [p.relative_to(workspace).as_posix() for p in workspace.rglob("*")
               if p.is_file() and p.relative_to(workspace).parts[0] != "sessions"  # the transcript quotes it
               and UTF16.strip() in p.read_text(errors="replace")]
    assert planted == [], planted
    assert (workspace / "notes" / "guest.md").read_text() == "allowed"


def _lucid(tmp_path: Path, config: Path, *args: str) -> str:
    done = subprocess.run([*LUCID, "memory", *args, "--config", str(config)], env=cli_env(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("where", [".gitattributes", "memory/.gitattributes"])
def test_a_planted_gitattributes_changes_nothing_memory_git_does(tmp_path: Path, workspace: Path,
                                                                 where: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    memory = workspace / "memory" / "MEMORY.md"
    memory.parent.mkdir()
    original = "# Memory\n\n- The owner likes tea.\n"
    memory.write_text(original, encoding="utf-8")
    GitStore(workspace).init()
    (workspace / where).write_text(UTF16 + "*.md diff=evil eol=crlf ident\n")
    memory.write_text(original + "- The owner likes coffee.\n", encoding="utf-8")

    log = _lucid(tmp_path, config, "log")  # commits the hand edit
    store = GitStore(workspace)
    newest = store.log(1)[0]
    assert newest.short in log and "memory/MEMORY.md" in newest.files
    blob = subprocess.run(["git", "-C", str(workspace), "cat-file", "blob", f"{newest.sha}:memory/MEMORY.md"],
                          capture_output=True, check=True).stdout
    assert blob == (original + "- The owner likes coffee.\n").encode("utf-8")

    diff = _lucid(tmp_path, config, "diff", newest.short)
    assert "Binary files" not in diff and "+- The owner likes coffee." in diff, diff

    _lucid(tmp_path, config, "restore", newest.short)
    assert memory.read_bytes() == original.encode("utf-8")
    memory.write_text(original + "- The owner likes cocoa.\n", encoding="utf-8")  # the next "remember"
    _lucid(tmp_path, config, "log")
    assert memory.read_bytes() == (original + "- The owner likes cocoa.\n").encode("utf-8")
    again = subprocess.run(["git", "-C", str(workspace), "cat-file", "blob", "HEAD:memory/MEMORY.md"],
                           capture_output=True, check=True).stdout
    assert again == (original + "- The owner likes cocoa.\n").encode("utf-8")
