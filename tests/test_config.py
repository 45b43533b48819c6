"""Config: defaults, precedence, environment overrides and clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucidgate.config import Config, ConfigError, load_config
from lucidgate.config.onboard import default_config_document, install_templates, write_config


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def test_defaults_match_design(tmp_path: Path) -> None:
    cfg = load_config(tmp_path / "missing.json", environ={})
    agent = cfg.agent
    assert agent.model == "openai/gpt-4o-mini"
    assert (agent.context_window_tokens, agent.max_completion_tokens, agent.safety_buffer) == (65536, 8192, 1024)
    assert agent.prompt_budget == 65536 - 8192 - 1024
    assert agent.dream.interval_h == 2 and agent.dream.max_batch_size == 20
    assert agent.memory.recent_history_limit == 50
    assert cfg.gateway.port == 18790 and cfg.tools.restrict_to_workspace
    assert cfg.channels.webhook.max_body_bytes == 1048576


def test_camel_and_snake_case_both_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"contextWindowTokens": 32000,
                                                               "max_completion_tokens": 1000}}})
    cfg = load_config(path, environ={})
    assert cfg.agent.context_window_tokens == 32000
    assert cfg.agent.max_completion_tokens == 1000


def test_precedence_flag_over_env_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write(tmp_path / "a.json", {"agents": {"defaults": {"model": "openai/a"}}})
    b = write(tmp_path / "b.json", {"agents": {"defaults": {"model": "openai/b"}}})
    monkeypatch.setenv("LUCIDGATE_CONFIG", str(b))
    assert load_config(None).agent.model == "openai/b"
    assert load_config(a).agent.model == "openai/a"


def test_environment_overrides_any_key(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"contextWindowTokens": 32000}}})
    env = {
        "LUCIDGATE_AGENTS__DEFAULTS__CONTEXT_WINDOW_TOKENS": "40000",
        "lucidgate_channels__telegram__allow_from": '["123", "@bob"]',
        "LUCIDGATE_PROVIDERS__OPENAI__API_KEY": "sk-env",
        "LUCIDGATE_AGENTS__DEFAULTS__DREAM__ENABLED": "false",
    }
    cfg = load_config(path, environ=env)
    assert cfg.agent.context_window_tokens == 40000
    assert cfg.channels.telegram.allow_from == ["123", "@bob"]
    assert cfg.providers.openai.api_key.get_secret_value() == "sk-env"
    assert cfg.agent.dream.enabled is False


def test_environment_values_are_json_only_for_lists_and_mappings(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {})
    env = {
        "LUCIDGATE_PROVIDERS__OPENAI__API_KEY": "12345678",  # digits: still a secret string
        "LUCIDGATE_CHANNELS__TELEGRAM__TOKEN": "true",
        "LUCIDGATE_CHANNELS__WEBHOOK__OWNERS": '["42"]',
        "LUCIDGATE_PROVIDERS__OPENAI__EXTRA_HEADERS": '{"X-Team": "7"}',
        "LUCIDGATE_AGENTS__DEFAULTS__MAX_TOOL_ITERATIONS": "12",
        "LUCIDGATE_AGENTS__DEFAULTS__MODEL": "null",
    }
    cfg = load_config(path, environ=env)
    assert cfg.providers.openai.api_key.get_secret_value() == "12345678"
    assert cfg.channels.telegram.token.get_secret_value() == "true"
    assert cfg.channels.webhook.owners == ["42"]
    assert cfg.providers.openai.extra_headers == {"X-Team": "7"}
    assert cfg.agent.max_tool_iterations == 12
    assert cfg.agent.model == "null"


def test_unknown_key_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"contextWindowTokenz": 1}}})
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert "agents.defaults.contextWindowTokenz" in str(exc.value)
    assert "unknown key" in str(exc.value)


def test_wrong_type_names_key_and_value(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"gateway": {"port": "eighty"}})
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert "gateway.port" in str(exc.value) and "eighty" in str(exc.value)


def test_invalid_json_points_at_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", '{\n  "agents": {,}\n}')
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert "line 2" in str(exc.value)


def test_budget_that_cannot_fit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"contextWindowTokens": 8192,
                                                               "maxCompletionTokens": 8000}}})
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert "contextWindowTokens" in str(exc.value)


def test_secrets_are_not_echoed_in_errors(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"providers": {"openai": {"apiKey": ["sk-very-secret"]}}})
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert "sk-very-secret" not in str(exc.value)


def test_other_providers_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"model": "anthropic/claude"}},
                                       "providers": {"anthropic": {"apiKey": "k"}}})
    cfg = load_config(path, environ={})
    name, provider = cfg.provider_for(cfg.agent.model)
    assert name == "anthropic" and provider is not None
    assert provider.api_key.get_secret_value() == "k"


def test_onboard_writes_once_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "config.json"
    assert write_config(path) is True
    first = path.read_text()
    assert write_config(path) is False and path.read_text() == first
    doc = json.loads(first)
    assert len(doc["channels"]["webhook"]["token"]) >= 32
    assert "**" not in first  # no masked secrets written
    assert load_config(path, environ={}).channels.webhook.token.get_secret_value() == doc["channels"]["webhook"]["token"]
    ws = tmp_path / "ws"
    (ws).mkdir()
    (ws / "SOUL.md").write_text("mine")
    written = install_templates(ws)
    assert "SOUL.md" not in written and (ws / "SOUL.md").read_text() == "mine"
    assert (ws / "memory" / "MEMORY.md").exists() and (ws / "AGENTS.md").exists()
    assert default_config_document()["channels"]["webhook"]["token"] != doc["channels"]["webhook"]["token"]


def test_cli_reports_bad_config_with_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"gateway": {"prot": 1}})
    proc = subprocess.run([sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "status",
                           "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "gateway.prot" in proc.stderr and "Traceback" not in proc.stderr


def test_onboard_writes_a_short_config_that_loads_to_the_full_defaults(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "config.json"
    assert write_config(path) is True
    text = path.read_text()
    assert len(text.splitlines()) < 40, text
    written = json.loads(text)
    # Nothing that equals a default but the model and its provider, the first things a person edits.
    assert set(written) == {"agents", "providers", "channels", "console"}
    assert set(written["channels"]) == {"webhook"} and written["agents"]["defaults"] == {"model": Config().agent.model}
    full = default_config_document()
    full["channels"]["webhook"].update(written["channels"]["webhook"])
    full["console"]["token"] = written["console"]["token"]
    assert load_config(path, environ={}).model_dump() == Config.model_validate(full).model_dump()


def test_onboard_with_a_config_path_puts_the_workspace_beside_it(tmp_path: Path) -> None:
    """A second setup made with ``-c other/config.json`` never points at the live workspace."""
    path = tmp_path / "other" / "config.json"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    env["HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "onboard",
                           "-c", str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    beside = (tmp_path / "other" / "workspace").resolve()
    assert json.loads(path.read_text())["agents"]["defaults"]["workspace"] == str(beside)
    assert (beside / "SOUL.md").exists() and not (tmp_path / "home" / ".lucidgate").exists()


def test_config_show_prints_what_is_set_and_with_defaults_everything(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"workspace": str(tmp_path / "ws")}},
                                       "providers": {"openai": {"apiKey": "sk-very-secret"}}})
    lucid = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "config", "show", "-c", str(path)]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    shown = subprocess.run(lucid, capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"agents": {"defaults": {"workspace": str(tmp_path / "ws")}},
                                        "providers": {"openai": {"apiKey": "**********"}}}
    env["LUCIDGATE_GATEWAY__PORT"] = "18799"
    everything = subprocess.run([*lucid, "--defaults"], capture_output=True, text=True, timeout=60, env=env)
    assert everything.returncode == 0, everything.stderr
    document = json.loads(everything.stdout)
    assert document["gateway"]["port"] == 18799 and document["agents"]["defaults"]["dream"]["intervalH"] == 2
    assert "sk-very-secret" not in shown.stdout + everything.stdout
