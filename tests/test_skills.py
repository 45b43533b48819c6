"""Skills that load: built-ins readable by their virtual path, the always-on memory skill,
nanobot/OpenClaw metadata honoured, and ``lucid skills list/add``."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.cli import build_app
from lucidgate.gateway.skills.catalog import SkillsLoader, builtin_skills_dir, config_checker
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.files import ReadFile, WriteFile
from lucidgate.gateway.tools.turn import TurnContext
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls


def ctx(workspace: Path, role: str = "owner") -> TurnContext:
    return TurnContext(session_key="cli:1", channel="cli", chat_id="1", sender_id="local",
                       role=role, chat_type="private", workspace=workspace)  # type: ignore[arg-type]


def skill(folder: Path, name: str, front: str, body: str = "Steps.") -> Path:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(f"---\n{front}\n---\n{body}\n")
    return folder / name


def by_name(workspace: Path, **kwargs: Any) -> dict[str, Any]:
    return {s.name: s for s in SkillsLoader(workspace, **kwargs).load()}


# ----------------------------------------------------------------------------- the virtual path


async def test_builtin_skills_are_read_by_their_virtual_path(workspace: Path) -> None:
    tools = ToolRegistry([ReadFile(), WriteFile()])
    text = await tools.execute(ctx(workspace), "read_file", {"path": "skills/cron/SKILL.md"})
    assert "name: cron" in text and "0 8 * * 1-5" in text
    assert "name: cron" in await tools.execute(ctx(workspace), "read_file", {"path": "./skills/cron/SKILL.md"})
    packaged = builtin_skills_dir() / "cron" / "SKILL.md"
    refused = await tools.execute(ctx(workspace), "read_file", {"path": str(packaged)})
    assert refused.startswith("Error: ") and "outside the workspace" in refused
    escape = await tools.execute(ctx(workspace), "read_file", {"path": "skills/cron/../../app.py"})
    assert escape.startswith("Error: ")
    missing = await tools.execute(ctx(workspace), "read_file", {"path": "skills/cron/nope.md"})
    assert missing.startswith("Error: ") and "does not exist" in missing


async def test_the_workspace_copy_wins_and_writing_creates_one(workspace: Path) -> None:
    tools = ToolRegistry([ReadFile(), WriteFile()])
    before = (builtin_skills_dir() / "cron" / "SKILL.md").read_text()
    written = await tools.execute(ctx(workspace), "write_file", {
        "path": "skills/cron/SKILL.md", "content": "---\nname: cron\ndescription: mine\n---\nMy way.\n"})
    assert written.startswith("Created skills/cron/SKILL.md")
    assert "My way." in await tools.execute(ctx(workspace), "read_file", {"path": "skills/cron/SKILL.md"})
    assert (builtin_skills_dir() / "cron" / "SKILL.md").read_text() == before  # package untouched
    assert by_name(workspace)["cron"].source == "workspace"


async def test_the_prompt_lists_every_skill_by_a_readable_path(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    fake_llm.queue(ToolCalls([("read_file", {"path": "skills/summarize/SKILL.md"})]),
                   Reply("I read the summarize skill."))
    gw = build_gateway(make_config())
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        await ch.say("summarise https://example.org for me", sender_id="local")
        await ch.wait_replies(1)
    system = fake_llm.requests[0]["messages"][0]["content"]
    for name in ("cron", "github", "skill-creator", "summarize"):
        assert f"[skills/{name}/SKILL.md]" in system
    assert str(builtin_skills_dir()) not in system  # never the package's absolute path
    # The memory skill is always on: its rules are in the prompt itself, not only listed.
    active = system.split("# Active Skills", 1)[1]
    assert "## memory" in active and "Do not rewrite USER.md" in active
    assert "[skills/memory/SKILL.md]" not in system
    result = next(m for m in fake_llm.requests[1]["messages"] if m.get("name") == "read_file")
    assert "web_fetch" in result["content"] and not result["content"].startswith("Error")


# ----------------------------------------------------------------------------- requirements


def test_github_needs_gh_on_the_path(workspace: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    github = by_name(workspace)["github"]
    assert not github.available and github.status == "unavailable: needs binary gh"
    gh = empty / "gh"
    gh.write_text("#!/bin/sh\nexit 0\n")
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    assert by_name(workspace)["github"].available


def test_nanobot_and_openclaw_metadata_are_honoured(workspace: Path, make_config: Callable,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAVE_THIS_VAR", "1")
    monkeypatch.delenv("NO_SUCH_VAR_Q", raising=False)
    folder = workspace / "skills"
    skill(folder, "nb-always", 'name: nb-always\ndescription: d\nmetadata: {"nanobot": {"always": true}}')
    skill(folder, "nb-bins", 'name: nb-bins\ndescription: d\n'
          'metadata: {"nanobot": {"requires": {"bins": ["no-such-bin-q"], "env": ["HAVE_THIS_VAR"]}}}')
    skill(folder, "oc-env", 'name: oc-env\ndescription: d\n'
          'metadata: {"openclaw": {"requires": {"env": ["NO_SUCH_VAR_Q"], "anyBins": ["no-a", "sh"]}}}')
    skill(folder, "oc-anybins", 'name: oc-anybins\ndescription: d\n'
          "metadata: '{\"openclaw\": {\"requires\": {\"anyBins\": [\"no-a\", \"no-b\"]}}}'")  # a JSON string
    skill(folder, "oc-os", 'name: oc-os\ndescription: d\nmetadata: {"openclaw": {"os": ["win32"]}}')
    skill(folder, "oc-linux", 'name: oc-linux\ndescription: d\nmetadata: {"openclaw": {"os": ["linux", "darwin"]}}')
    skill(folder, "oc-config", 'name: oc-config\ndescription: d\n'
          'metadata: {"openclaw": {"requires": {"config": ["tools.web.search.provider", "tools.restrictToWorkspace"]}}}')
    found = by_name(workspace, config_check=config_checker(make_config()))
    assert found["nb-always"].always and found["nb-always"].available
    assert found["nb-bins"].missing == ("binary no-such-bin-q",)
    assert found["oc-env"].missing == ("env NO_SUCH_VAR_Q",)
    assert found["oc-anybins"].missing == ("one of the binaries no-a, no-b",)
    assert found["oc-os"].missing == ("os win32 (this is linux)",)
    assert found["oc-linux"].available
    assert found["oc-config"].missing == ("config tools.web.search.provider",)
    with_search = make_config(tools={"web": {"search": {"provider": "brave"}}})
    assert by_name(workspace, config_check=config_checker(with_search))["oc-config"].available


# ----------------------------------------------------------------------------- lucid skills


@pytest.fixture
def cli_config(make_config: Callable, tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(make_config().model_dump_json(by_alias=True))
    return path


def lucid(*args: str) -> Any:
    return CliRunner().invoke(build_app(), list(args), env={"COLUMNS": "250"})


def test_skills_list_shows_source_and_availability(cli_config: Path, workspace: Path,
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no gh here
    skill(workspace / "skills", "weekly-report", "name: weekly-report\ndescription: Write the weekly report")
    result = lucid("skills", "list", "--config", str(cli_config))
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 4}
    assert "built-in" in rows["cron"] and "available" in rows["cron"]
    assert "always on" in rows["memory"]
    assert "unavailable: needs binary gh" in rows["github"]
    assert "workspace" in rows["weekly-report"] and "skills/weekly-report/SKILL.md" in rows["weekly-report"]


def test_skills_add_a_folder_never_overwrites_without_force(cli_config: Path, workspace: Path,
                                                            tmp_path: Path) -> None:
    source = skill(tmp_path / "src", "trip-planner", "name: trip-planner\ndescription: Plan trips",
                   body="Version one.")
    (source / "checklist.md").write_text("- passport\n")
    result = lucid("skills", "add", str(source), "--config", str(cli_config))
    assert result.exit_code == 0 and "installed skill 'trip-planner'" in result.output, result.output
    installed = workspace / "skills" / "trip-planner"
    assert (installed / "checklist.md").read_text() == "- passport\n"
    (source / "SKILL.md").write_text("---\nname: trip-planner\ndescription: Plan trips\n---\nVersion two.\n")
    again = lucid("skills", "add", str(source), "--config", str(cli_config))
    assert again.exit_code == 1 and "--force" in again.output
    assert "Version one." in (installed / "SKILL.md").read_text()
    forced = lucid("skills", "add", str(source), "--force", "--config", str(cli_config))
    assert forced.exit_code == 0 and "replaced" in forced.output
    assert "Version two." in (installed / "SKILL.md").read_text()
    assert sorted(p.name for p in (workspace / "skills").iterdir()) == ["trip-planner"]  # no leftovers


def test_skills_add_archives(cli_config: Path, workspace: Path, tmp_path: Path) -> None:
    text = "---\nname: {name}\ndescription: From an archive\nmetadata: {{\"openclaw\": {{\"always\": true}}}}\n---\nBody.\n"
    zipped = tmp_path / "notes-skill.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("SKILL.md", text.format(name="zipped"))
    tarred = tmp_path / "tarred.tar.gz"
    with tarfile.open(tarred, "w:gz") as tf:
        data = text.format(name="tarred").encode()
        info = tarfile.TarInfo("tarred-1.0/SKILL.md")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    for archive in (zipped, tarred):
        result = lucid("skills", "add", str(archive), "--config", str(cli_config))
        assert result.exit_code == 0, result.output
    found = by_name(workspace)
    assert found["zipped"].always and found["tarred"].source == "workspace"


@pytest.mark.parametrize("front, message", [
    (None, "has no frontmatter"),
    ("name: Bad Name\ndescription: d", "'name' must be lowercase"),
    ("name: ok-name", "'description' is missing"),
    ("name: [unclosed\ndescription: d", "not valid YAML"),
])
def test_skills_add_refuses_invalid_skills(cli_config: Path, workspace: Path, tmp_path: Path,
                                           front: str | None, message: str) -> None:
    source = tmp_path / "src" / "bad"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text("Just text.\n" if front is None else f"---\n{front}\n---\nBody\n")
    result = lucid("skills", "add", str(source), "--config", str(cli_config))
    assert result.exit_code == 1 and message in result.output, result.output
    assert not (workspace / "skills").exists() or [p for p in (workspace / "skills").iterdir()] == []


def test_skills_add_refuses_unsafe_archives(cli_config: Path, workspace: Path, tmp_path: Path) -> None:
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("SKILL.md", "---\nname: evil\ndescription: d\n---\n")
        zf.writestr("../../outside.txt", "gotcha")
    result = lucid("skills", "add", str(evil), "--config", str(cli_config))
    assert result.exit_code == 1 and "unsafe path" in result.output
    assert not (tmp_path / "outside.txt").exists() and not (workspace / "skills" / "evil").exists()
    missing = lucid("skills", "add", str(tmp_path / "nope"), "--config", str(cli_config))
    assert missing.exit_code == 1 and "does not exist" in missing.output
    assert os.listdir(workspace / "skills") == []
