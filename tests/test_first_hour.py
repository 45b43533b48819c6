"""What a new user trips on in the first hour: a mistyped ``-c``, hints that name the
command that works where the user is, a trailing comma, and doctor's model latency."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lucidgate.config import ConfigError, load_config
from lucidgate.gateway.cli import build_app
from lucidgate.gateway.ops.doctor import run_checks
from tests.fakes.llm import FakeLLMServer
from tests.test_cli import write_config
from tests.test_ops_doctor import _lucid, by_name, write_setup


def test_a_mistyped_config_path_is_an_error_not_a_new_setup(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong" / "nope.json"
    for args in (["agent", "-m", "hi"], ["gateway"], ["import", "nanobot", "--dry-run"]):
        result = CliRunner().invoke(build_app(), [*args, "-c", str(wrong)])
        assert result.exit_code == 2, (args, result.output)
        assert f"config file {wrong} does not exist" in result.output
        assert f"lucid onboard -c {wrong}" in result.output
    assert not wrong.parent.exists()  # nothing was written


def test_onboard_still_creates_the_named_config(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "config.json"
    result = CliRunner().invoke(build_app(), ["onboard", "-c", str(path)])
    assert result.exit_code == 0, result.output
    assert json.loads(path.read_text())["channels"]["webhook"]["token"]


async def test_doctor_with_a_config_flag_repeats_it_in_every_fix(tmp_path: Path) -> None:
    missing = tmp_path / "other.json"
    [only] = await run_checks(missing, {})
    assert only.state == "fail" and f"lucid onboard -c {missing}" in only.fix
    path = tmp_path / "other-config.json"
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "no-ws")}}}))
    workspace = by_name(await run_checks(path, {}))["workspace"]
    assert workspace.state == "fail" and f"`lucid onboard -c {path}`" in workspace.fix


async def test_a_trailing_comma_is_named_with_its_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "agents": {"defaults": {\n    "model": "openai/x",\n  }}\n}\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path, {})
    message = str(raised.value)
    assert 'line 3, column 24: a trailing comma after "model"' in message
    assert '    "model": "openai/x",' in message and message.endswith("^")
    [config] = await run_checks(path, {})
    assert "correct the JSON where the ^ points" in config.fix and "named above" not in config.fix


async def test_memory_diff_of_an_unknown_commit_points_at_the_cli_log(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", tmp_path / "ws", None)
    result = CliRunner().invoke(build_app(), ["memory", "diff", "deadbeef", "-c", str(config)])
    assert result.exit_code != 0
    assert "lucid memory log" in result.output, result.output


@pytest.mark.slow
async def test_doctor_times_the_model_not_the_import(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    # A fresh process, so litellm is not imported yet (2-4 s); the fake answers at once.
    path = write_setup(tmp_path, fake_llm.base_url)
    code, out, err = await _lucid("doctor", "--config", str(path), "--json")
    model = next(c for c in json.loads(out)["checks"] if c["name"] == "model")
    found = re.search(r"answered in (\d+\.\d+)s \(litellm's own set-up, (\d+\.\d+)s, not counted\)",
                      model["detail"])
    assert model["ok"] and found, (model, err)
    # The request alone, a fraction of the set-up it used to include (both scale with load).
    assert float(found.group(1)) < float(found.group(2)) / 2, model
    assert len(fake_llm.requests) == 1  # the warm-up never leaves the process


@pytest.mark.parametrize("who", ["root", "ana"])
def test_service_install_says_so_before_it_writes_user_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           who: str) -> None:
    config = write_config(tmp_path / "config.json", tmp_path / "ws", None)
    monkeypatch.delenv("SUDO_USER", raising=False)
    monkeypatch.setattr("getpass.getuser", lambda: who)
    result = CliRunner().invoke(build_app(), ["service", "install", "--print", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert f"User={who}" in result.stdout
    noted = "the service will run as root" in result.stderr
    assert noted is (who == "root") and ("--user" in result.stderr) is (who == "root")
