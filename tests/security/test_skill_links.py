"""Item 6: ``lucid skills add <folder>`` never copies what a link points at.

A skill folder whose files are symbolic links (to the config, to a folder elsewhere) or a hard
link to the config is refused through the real CLI, as an archive holding a link is: nothing of
the config lands in the guest-readable skills folder, and the refusal names the link. A folder
whose only hard links are to each other, inside it, installs.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.security._trust1_kit import LUCID, cli_env

SECRET = "sk-OWNER-0123456789-skill-leak"
SKILL = "---\nname: handy\ndescription: Handy things\n---\nDo handy things.\n"


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}},
                                  "providers": {"openai": {"apiKey": SECRET}}}))
    source = tmp_path / "src" / "handy"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(SKILL)
    return workspace, config, source


def _add(tmp_path: Path, config: Path, source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LUCID, "skills", "add", str(source), "--config", str(config)],
                          env=cli_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)


def _link_file(source: Path, config: Path) -> str:
    (source / "notes.md").symlink_to(config)
    return "notes.md"


def _link_nested_file(source: Path, config: Path) -> str:
    (source / "docs").mkdir()
    (source / "docs" / "ref.md").symlink_to(config)
    return "docs/ref.md"


def _link_folder(source: Path, config: Path) -> str:
    (source / "extra").symlink_to(config.parent)
    return "extra"


def _hard_link(source: Path, config: Path) -> str:
    os.link(config, source / "notes.md")
    return "notes.md"


def _linked_skill_md(source: Path, config: Path) -> str:
    (source / "SKILL.md").unlink()
    real = config.parent / "elsewhere.md"
    real.write_text(SKILL + f"\n{config.read_text()}\n")
    (source / "SKILL.md").symlink_to(real)
    return "SKILL.md"


@pytest.mark.parametrize("plant", [_link_file, _link_nested_file, _link_folder, _hard_link, _linked_skill_md],
                         ids=["symlink-file", "symlink-nested", "symlink-folder", "hard-link", "symlink-skill-md"])
def test_skills_add_refuses_a_folder_with_links(tmp_path: Path, plant: Callable[[Path, Path], str]) -> None:
    workspace, config, source = _setup(tmp_path)
    name = plant(source, config)
    done = _add(tmp_path, config, source)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "not installed" in output and repr(name) in output.replace("\n", ""), output
    assert "link" in output
    skills = workspace / "skills"
    assert not (skills / "handy").exists()
    for path in workspace.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_skills_add_keeps_plain_folders_and_inner_hard_links(tmp_path: Path) -> None:
    workspace, config, source = _setup(tmp_path)
    (source / "scripts").mkdir()
    (source / "scripts" / "run.sh").write_text("#!/bin/sh\necho ok\n")
    os.chmod(source / "scripts" / "run.sh", 0o755)
    os.link(source / "scripts" / "run.sh", source / "run.sh")  # both names are inside the folder
    done = _add(tmp_path, config, source)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = workspace / "skills" / "handy"
    assert (installed / "SKILL.md").read_text() == SKILL
    assert (installed / "scripts" / "run.sh").read_text() == "#!/bin/sh\necho ok\n"
    assert os.access(installed / "scripts" / "run.sh", os.X_OK)
    assert (installed / "run.sh").stat().st_nlink == 1  # a copy, not a link to the source
