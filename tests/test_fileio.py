"""The shared file helpers: atomic writes (config/fileio.py), frontmatter and exact edits."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lucidgate.config.fileio import atomic_write, atomic_write_bytes, atomic_write_text
from lucidgate.memory.frontmatter import parse_frontmatter
from lucidgate.memory.textedit import EditError, replace_exact


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_temp_file_is_private_from_the_first_byte(tmp_path: Path) -> None:
    target = tmp_path / "inbox.jsonl"
    old = os.umask(0o000)  # the most permissive umask: nothing may leak through it
    try:
        with atomic_write(target) as fh:
            fh.write(b"secret\n")
            temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
            assert len(temps) == 1 and _mode(temps[0]) == 0o600
            assert not target.exists()
    finally:
        os.umask(old)
    assert target.read_bytes() == b"secret\n" and _mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["inbox.jsonl"]


def test_folder_is_fsynced_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    atomic_write_text(tmp_path / "a.txt", "x")
    assert synced == ["file", "dir"]
    synced.clear()
    atomic_write_text(tmp_path / "b.txt", "x", durable=False)  # rebuildable files skip both
    assert synced == []


def test_failure_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write(b"half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_mode_and_keep_mode(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("echo 1\n")
    script.chmod(0o755)
    atomic_write_bytes(script, b"echo 2\n", mode=0o644, keep_mode=True)
    assert _mode(script) == 0o755 and script.read_text() == "echo 2\n"
    fresh = tmp_path / "new.md"
    atomic_write_bytes(fresh, b"x", mode=0o644, keep_mode=True)
    assert _mode(fresh) == 0o644
    atomic_write_text(tmp_path / "nested" / "deep.txt", "é\r\n")
    assert (tmp_path / "nested" / "deep.txt").read_bytes() == "é\r\n".encode()


# ------------------------------------------------------------------------- frontmatter

def test_frontmatter_plain() -> None:
    parsed = parse_frontmatter("---\nname: git\ndescription: Use git\n---\n\n# Steps\n")
    assert parsed.meta == {"name": "git", "description": "Use git"}
    assert parsed.body == "# Steps\n" and parsed.error is None


def test_frontmatter_survives_a_yaml_line_starting_with_dashes() -> None:
    # A key that starts with '---' is valid YAML; the block ends only at a line that is
    # exactly '---', so the keys after it are not lost into the body.
    parsed = parse_frontmatter("---\nname: rule\n---note: keep\ndescription: x\n---\nbody\n")
    assert parsed.meta == {"name": "rule", "---note": "keep", "description": "x"}
    assert parsed.body == "body\n"


def test_a_four_dash_rule_is_not_an_opener() -> None:
    text = "----\nname: x\n---\nbody\n"
    parsed = parse_frontmatter(text)
    assert parsed.meta is None and parsed.body == text


def test_byte_order_mark_does_not_hide_frontmatter() -> None:
    parsed = parse_frontmatter("\ufeff---\r\nname: bom\r\ndescription: from Windows\r\n---\r\nsteps\r\n")
    assert parsed.meta == {"name": "bom", "description": "from Windows"}
    assert parsed.body == "steps\r\n"


def test_broken_frontmatter_says_why() -> None:
    assert parse_frontmatter("---\nname: [x\n---\nbody").error is not None
    assert "closing" in (parse_frontmatter("---\nname: x\nbody").error or "")
    assert "mapping" in (parse_frontmatter("---\n- a\n---\n").error or "")


def test_skills_and_dream_share_the_parser(tmp_path: Path) -> None:
    from lucidgate.gateway.skills.catalog import parse_skill
    from lucidgate.memory.dream_tools import list_skills

    folder = tmp_path / "skills" / "bom"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("\ufeff---\nname: bom\ndescription: found\n---\nsteps\n",
                                     encoding="utf-8")
    skill = parse_skill(folder / "SKILL.md")
    assert skill is not None and skill.description == "found" and skill.body == "steps\n"
    assert [(s.name, s.description) for s in list_skills(tmp_path)] == [("bom", "found")]


# ---------------------------------------------------------------------------- edits

def test_replace_exact_unique_ambiguous_and_miss() -> None:
    text = "a = 1\nb = 2\na = 1\n"
    assert replace_exact(text, "b = 2", "b = 3", shown="f.py") == ("a = 1\nb = 3\na = 1\n", 1)
    with pytest.raises(EditError, match=r"occurs 2 times in f.py \(lines 1, 3\).*replace_all"):
        replace_exact(text, "a = 1", "a = 0", shown="f.py")
    with pytest.raises(EditError) as miss:
        replace_exact(text, "b = 9", "b = 3", shown="f.py", offer_replace_all=False)
    assert "Closest region is lines 2-2" in str(miss.value) and "+b = 2" in str(miss.value)
    assert replace_exact(text, "a = 1", "a = 0", shown="f.py", replace_all=True)[1] == 2
    with pytest.raises(EditError, match="identical"):
        replace_exact(text, "b = 2", "b = 2", shown="f.py")
