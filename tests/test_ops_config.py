"""Operator-facing config behaviour: a misspelt environment override is reported against the
variable with the closest name, systemd credentials are read, ``lucid onboard
--webhook-token`` makes a token for an existing config, and ``lucid service install``
writes a unit for this installation."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lucidgate.config import ConfigError, load_config
from lucidgate.gateway.cli import build_app
from tests.real_tools import need_tool


def test_an_env_typo_names_the_variable_and_the_closest_one(tmp_path):
    missing = tmp_path / "none.json"
    with pytest.raises(ConfigError) as exc:
        load_config(missing, {"LUCIDGATE_GATEWAY__PROT": "8080"})
    text = str(exc.value)
    assert text.startswith("environment variable LUCIDGATE_GATEWAY__PROT") and str(missing) not in text
    assert "did you mean LUCIDGATE_GATEWAY__PORT?" in text
    with pytest.raises(ConfigError, match="LUCIDGATE_AGENTS__DEFAULTS"):
        load_config(missing, {"LUCIDGATE_AGENTS__DEFALTS__MODEL": "x"})
    # A bad value is reported against its variable too, not against the file.
    with pytest.raises(ConfigError) as bad:
        load_config(missing, {"LUCIDGATE_GATEWAY__PORT": "eighty"})
    assert "LUCIDGATE_GATEWAY__PORT (gateway.port)" in str(bad.value) and str(missing) not in str(bad.value)
    # Free-form places (provider names) still take any name.
    config = load_config(missing, {"LUCIDGATE_PROVIDERS__ANTHROPIC__API_KEY": "sk-ant-x"})
    assert config.providers.get("anthropic") is not None


def test_a_misspelt_file_key_gets_a_suggestion(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"channels": {"telegram": {"allowFrm": ["1"]}}}))
    with pytest.raises(ConfigError, match=r"channels\.telegram\.allowFrm: unknown key \(did you mean 'allowFrom'\?\)"):
        load_config(path, {})


def test_systemd_credentials_are_applied(tmp_path):
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "LUCIDGATE_PROVIDERS__OPENAI__API_KEY").write_text("sk-from-credential\n")
    (creds / "unrelated").write_text("ignored")
    config = load_config(tmp_path / "none.json", {"CREDENTIALS_DIRECTORY": str(creds),
                                                  "LUCIDGATE_PROVIDERS__OPENAI__API_KEY": "sk-from-env"})
    assert config.providers.openai.api_key.get_secret_value() == "sk-from-credential"


def test_onboard_webhook_token_for_an_existing_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"defaults": {"model": "openai/x"}}, "channels": {"webhook": {"token": ""}}}))
    result = CliRunner().invoke(build_app(), ["onboard", "--config", str(path), "--webhook-token"])
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    token = doc["channels"]["webhook"]["token"]
    assert len(token) >= 32 and token in result.output
    assert doc["agents"]["defaults"]["model"] == "openai/x"  # nothing else changed
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again = CliRunner().invoke(build_app(), ["onboard", "--config", str(path), "--webhook-token"])
    assert json.loads(path.read_text())["channels"]["webhook"]["token"] != token and again.exit_code == 0


def test_service_install_writes_a_unit_for_this_installation(tmp_path):
    config = tmp_path / "home" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "home" / "ws")}}}))
    (tmp_path / "home" / "lucidgate.env").write_text("LUCIDGATE_PROVIDERS__OPENAI__API_KEY=sk-x\n")
    runner = CliRunner()
    printed = runner.invoke(build_app(), ["service", "install", "--config", str(config), "--print"])
    assert printed.exit_code == 0, printed.output
    unit = printed.stdout  # a note (e.g. "will run as root") goes to stderr
    assert f"Environment=LUCIDGATE_CONFIG={config.resolve()}" in unit
    assert f"EnvironmentFile={(config.parent / 'lucidgate.env').resolve()}" in unit
    assert re.search(r"^ExecStart=/\S+/lucid gateway --log-format json$", unit, re.M)
    assert re.search(r"^User=\S+$", unit, re.M) and "Type=notify" in unit
    assert str(config.parent.resolve()) in unit  # writable: ReadWritePaths= or BindPaths=

    written = runner.invoke(build_app(), ["service", "install", "--config", str(config),
                                          "--unit-dir", str(tmp_path / "units")])
    assert written.exit_code == 0, written.output
    path = tmp_path / "units" / "lucidgate.service"
    assert path.read_text() == unit
    assert "systemctl daemon-reload && sudo systemctl enable --now lucidgate" in written.output
    rated = subprocess.run([need_tool("systemd-analyze"), "security", "--offline=yes", str(path)],
                           capture_output=True, text=True, check=False)
    score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", rated.stdout + rated.stderr)
    assert score and float(score.group(1)) <= 2.5, rated.stdout + rated.stderr

    user = runner.invoke(build_app(), ["service", "install", "--config", str(config), "--user", "--print"])
    assert user.exit_code == 0 and "User=" not in user.output and "WantedBy=default.target" in user.output
    assert "DynamicUser" not in user.output


def test_service_install_says_how_when_it_cannot_write(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("a file where the unit folder should be")
    config = tmp_path / "config.json"
    config.write_text("{}")
    result = CliRunner().invoke(build_app(), ["service", "install", "--config", str(config),
                                              "--unit-dir", str(target / "sub")])
    assert result.exit_code == 1 and "cannot write the unit" in result.output and "--print" in result.output
    _ = Path
