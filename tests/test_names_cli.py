"""A new user's workspace with a skill called 天气, through the real ``lucid`` command.

``lucid onboard``, a skill folder named in Chinese, then ``lucid agent -m`` against the fake
OpenAI server: the turn answers, and the memory history holds the skill and a file the
model itself named with quotes and a leading dash. ``lucid dream`` runs over such a
workspace. A commit that cannot happen (a live ``index.lock``) leaves the turn answered,
``lucid doctor`` saying so, and a later commit clearing it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_cli_memory import lucid, prepare_memory, write_config

pytestmark = pytest.mark.slow

WEATHER = "skills/天气/SKILL.md"
MODEL_NAMED = 'skills/-say "hi" 🐈/SKILL.md'


def committed(workspace: Path) -> list[str]:
    """Every path any commit touched, read NUL-separated."""
    out = subprocess.run(["git", "-C", str(workspace), "log", "--name-only", "--format=", "-z"],
                         check=True, capture_output=True).stdout
    return [p.decode() for p in out.split(b"\0") if p.strip(b"\n")]


def messages(workspace: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(workspace), "log", "--format=%s"], check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


async def onboarded(tmp_path: Path, api_base: str) -> tuple[Path, Path]:
    """``lucid onboard`` as a new user runs it, then the fake model as the provider."""
    code, out, err = await lucid("onboard", home=tmp_path)
    assert code == 0, err
    config = tmp_path / ".lucidgate" / "config.json"
    doc: dict[str, Any] = json.loads(config.read_text())
    defaults = doc.setdefault("agents", {}).setdefault("defaults", {})
    defaults.update({"model": "openai/fake-model", "llmRetries": 0, "llmRetryBaseDelayS": 0.01})
    doc.setdefault("providers", {})["openai"] = {"apiKey": "sk-test", "apiBase": api_base}
    config.write_text(json.dumps(doc))
    workspace = str(defaults.get("workspace") or "~/.lucidgate/workspace")
    return config, tmp_path / workspace.removeprefix("~/") if workspace.startswith("~/") else Path(workspace)


async def doctor(config: Path, home: Path) -> dict[str, Any]:
    code, out, err = await lucid("doctor", "--json", "--config", str(config), home=home)
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    return checks["memory commits"]


async def test_a_skill_named_in_chinese_and_a_quoted_name_the_model_writes_are_committed(
        fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config, workspace = await onboarded(tmp_path, fake_llm.base_url)
    (workspace / "skills" / "天气").mkdir(parents=True)
    (workspace / WEATHER).write_text("---\nname: weather-zh\ndescription: 天气预报\n---\n查天气。\n")
    fake_llm.queue(ToolCalls([("write_file", {"path": MODEL_NAMED, "content": "# Say hi\n"})]),
                   Reply("Noted: your tea is green."))

    code, out, err = await lucid("agent", "-m", "please remember my tea is green", "--config", str(config),
                                 home=tmp_path)

    assert code == 0, err
    assert "Noted: your tea is green." in out and "Traceback" not in err
    assert WEATHER in committed(workspace) and MODEL_NAMED in committed(workspace)
    assert messages(workspace)[0] == f"agent: write {MODEL_NAMED} (cli:local)"
    # The skill is offered to the model under its own name.
    assert "weather-zh" in json.dumps(fake_llm.requests[0]["messages"], ensure_ascii=False)
    code, out, err = await lucid("memory", "log", "--config", str(config), home=tmp_path)
    assert code == 0 and "天气" in out and '-say "hi" 🐈' in out, err
    assert (await doctor(config, tmp_path))["state"] == "ok"


async def test_dream_runs_over_a_workspace_with_such_names(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config, workspace = write_config(tmp_path, fake_llm.base_url)
    prepare_memory(workspace)
    (workspace / "skills" / "天气").mkdir(parents=True)
    (workspace / WEATHER).write_text("# 天气\n")
    (workspace / "memory" / "日记.md").write_text("# 日记\n绿茶。\n")
    fake_llm.queue(
        Reply("[USER] likes tea\n"),
        ToolCalls([("edit_file", {"path": "USER.md", "old_text": "- Lives in Porto\n",
                                  "new_text": "- Lives in Porto\n- Likes tea\n"})]),
        Reply("Applied one finding."),
    )

    code, out, err = await lucid("dream", "--config", str(config), home=tmp_path)

    assert code == 0, err + out
    assert "1 change(s)" in out and "Traceback" not in err
    assert messages(workspace)[0].startswith("dream: ")
    assert WEATHER in committed(workspace)
    (workspace / WEATHER).write_text("# 天气\n晴。\n")  # a hand edit, seen by the next command
    code, out, err = await lucid("memory", "log", "--config", str(config), home=tmp_path)
    assert code == 0, err
    row = next(line for line in out.splitlines() if "manual:" in line)
    sha = row.strip().strip("│").split("│")[0].strip()
    code, out, err = await lucid("memory", "diff", sha, "--config", str(config), home=tmp_path)
    assert code == 0 and "+晴。" in out and WEATHER in out, err
    code, out, err = await lucid("memory", "restore", sha, "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert (workspace / WEATHER).read_text() == "# 天气\n"


async def test_a_commit_that_fails_leaves_the_turn_answered_and_doctor_reporting_it(
        fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config, workspace = await onboarded(tmp_path, fake_llm.base_url)
    # A repository whose first commit cannot happen: another git holds the index.
    subprocess.run(["rm", "-rf", str(workspace / ".git")], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(workspace)], check=True)
    lock = workspace / ".git" / "index.lock"
    lock.write_text("")
    fake_llm.queue(ToolCalls([("write_file", {"path": "USER.md", "content": "# User\n- tea: green\n"})]),
                   Reply("Noted."))

    code, out, err = await lucid("agent", "-m", "please remember my tea is green", "--config", str(config),
                                 home=tmp_path)

    assert code == 0 and "Noted." in out and "Traceback" not in err, err
    assert (workspace / "USER.md").read_text() == "# User\n- tea: green\n"
    report = await doctor(config, tmp_path)
    assert report["state"] == "fail" and "index.lock" in report["detail"], report
    assert "last commit failed" in report["detail"]

    lock.unlink()
    code, out, err = await lucid("memory", "log", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "USER.md" in committed(workspace)
    assert (await doctor(config, tmp_path))["state"] == "ok"
