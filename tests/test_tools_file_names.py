"""Paths small local models send: "" for list_dir, odd characters for write_file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lucidgate.config import Config
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.builtin import builtin_tools
from tests.fakes.context import make_ctx


async def call(workspace: Path, name: str, **arguments: object) -> str:
    registry = ToolRegistry(builtin_tools(Config()))
    return await registry.execute(make_ctx(workspace), name, json.dumps(arguments))


async def test_list_dir_with_an_empty_path_lists_the_workspace(workspace: Path) -> None:
    (workspace / "notes").mkdir()
    (workspace / "a.md").write_text("x")
    default = await call(workspace, "list_dir")
    assert await call(workspace, "list_dir", path="") == default
    assert await call(workspace, "list_dir", path="  ") == default
    assert "notes/" in default and "a.md" in default


@pytest.mark.parametrize(("name", "shown"), [
    ("cat\nmiso.md", "U+000A"),
    ("notes/\tcat.md", "U+0009"),
    ("cat\x1b[31m.md", "U+001B"),
    ("cat\x7f.md", "U+007F"),
    ("cat\x00.md", "U+0000"),
    ("cat\u0085.md", "U+0085"),
])
async def test_write_file_refuses_control_characters(workspace: Path, name: str, shown: str) -> None:
    out = await call(workspace, "write_file", path=name, content="Miso")
    assert out.startswith("Error:") and "control character" in out and shown in out
    assert list(workspace.rglob("*")) == []  # nothing created, not even a parent folder


async def test_write_file_refuses_backslashes_and_suggests_slashes(workspace: Path) -> None:
    out = await call(workspace, "write_file", path="notes\\cats.md", content="Miso")
    assert out.startswith("Error:") and "backslash" in out and "notes/cats.md" in out
    assert list(workspace.rglob("*")) == []
    ok = await call(workspace, "write_file", path="notes/cats – Miso é.md", content="Miso")
    assert ok.startswith("Created notes/cats – Miso é.md")  # printable unicode is fine
    assert (workspace / "notes" / "cats – Miso é.md").read_text() == "Miso"
