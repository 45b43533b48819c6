"""The `lucid` command line, run as a real subprocess against the fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLMServer, Reply

LUCID = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()"]


async def lucid(*args: str, home: Path, timeout: float = 90,
                env: dict[str, str] | None = None) -> tuple[int, str, str]:
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    env["HOME"] = str(home)
    env.update(extra)
    proc = await asyncio.create_subprocess_exec(
        *LUCID, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode()


def write_config(path: Path, workspace: Path, api_base: str | None) -> Path:
    doc: dict = {"agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model",
                                         "llmRetryBaseDelayS": 0.01}}}
    if api_base:
        doc["providers"] = {"openai": {"apiBase": api_base}}
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.slow
async def test_agent_one_shot_answers_and_keeps_history(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", tmp_path / "ws", fake_llm.base_url)
    # The first reply quotes someone's stored words: control characters reach the terminal
    # as text, while the transcript keeps the words as they were. (One process fewer than a
    # separate run for the quote: each `lucid agent` pays seconds for importing litellm.)
    first = "Hello from the fake model: \x1b]0;pwned\x07Tea\x1b[2J time"
    fake_llm.queue(Reply(first), Reply("Second answer"))
    code, out, err = await lucid("agent", "-m", "hi there", "--config", str(config), home=tmp_path)
    assert code == 0, err
    assert "Hello from the fake model" in out
    assert "]0;pwnedTea[2J time" in out and "\x1b" not in out and "\x07" not in out, repr(out)
    code, out, err = await lucid("agent", "-m", "again", "--config", str(config), home=tmp_path)
    assert code == 0 and "Second answer" in out
    second = fake_llm.requests[-1]["messages"]
    assert any(m["role"] == "assistant" and m["content"] == first for m in second)
    sessions = list((tmp_path / "ws" / "sessions").glob("cli_*.jsonl"))
    assert len(sessions) == 1
    assert (tmp_path / "ws" / "SOUL.md").exists()  # templates installed on first run


@pytest.mark.slow
async def test_agent_without_a_model_explains_how_to_add_one(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", tmp_path / "ws", None)
    code, out, err = await lucid("agent", "-m", "hi", "--config", str(config), home=tmp_path)
    assert code == 2
    assert "apiKey" in err and "apiBase" in err and "Traceback" not in err


async def test_onboard_then_status_and_help(tmp_path: Path) -> None:
    code, out, err = await lucid("onboard", home=tmp_path)
    assert code == 0, err
    config_path = tmp_path / ".lucidgate" / "config.json"
    doc = json.loads(config_path.read_text())
    assert doc["channels"]["webhook"]["token"]
    assert (tmp_path / ".lucidgate" / "workspace" / "memory" / "MEMORY.md").exists()
    assert oct(config_path.stat().st_mode & 0o777) == "0o600"
    code, out, _ = await lucid("onboard", home=tmp_path)
    assert "left as it is" in out and json.loads(config_path.read_text()) == doc
    code, out, _ = await lucid("status", home=tmp_path)
    # No provider yet: status says so and exits 1 (scripts can tell); no gateway runs.
    assert code == 1 and "workspace" in out and "not configured" in out and "gateway:   not running" in out
    code, out, _ = await lucid("--help", home=tmp_path)
    assert code == 0 and "agent" in out and "gateway" in out and "memory" in out


@pytest.mark.slow
async def test_litellm_import_stays_offline_and_ignores_dotenv(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("OPENAI_API_KEY=from-a-stray-dotenv\n")
    code = ("import os\nfrom lucidgate.gateway.model.client import import_litellm\nimport_litellm()\n"
            "print('KEY=' + os.environ.get('OPENAI_API_KEY', 'unset'))\n"
            "print('LOCAL=' + os.environ['LITELLM_LOCAL_MODEL_COST_MAP'])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "LITELLM_LOCAL_MODEL_COST_MAP")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=tmp_path, env=env,
                                                stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    assert "KEY=unset" in out.decode() and "LOCAL=True" in out.decode()


async def test_files_the_cli_creates_are_private(tmp_path: Path) -> None:
    code, out, err = await lucid("onboard", home=tmp_path)
    assert code == 0, err
    workspace = tmp_path / ".lucidgate" / "workspace"
    for path in [workspace, workspace / "SOUL.md", workspace / "memory" / "MEMORY.md", workspace / "sessions"]:
        assert path.stat().st_mode & 0o077 == 0, path


async def test_version_and_help_screens(tmp_path: Path) -> None:
    from importlib.metadata import version

    code, out, _ = await lucid("--version", home=tmp_path)
    assert code == 0 and out.strip() == f"lucidgate {version('lucidgate')}"
    for args in (["--help"], ["agent", "--help"], ["gateway", "--help"], ["memory", "--help"]):
        code, out, err = await lucid(*args, home=tmp_path)
        assert code == 0, err
        assert "Usage: lucid" in out and "<bool>" not in out
    code, out, _ = await lucid("--help", home=tmp_path)
    assert all(name in out for name in ("onboard", "agent", "status", "gateway", "jobs", "memory", "pairing"))


async def test_a_wide_terminal_shows_each_commands_description_uncut(tmp_path: Path) -> None:
    for args in (["--help"], ["memory", "--help"]):
        code, out, err = await lucid(*args, home=tmp_path, env={"COLUMNS": "200"})
        assert code == 0, err
        listed = out.split("Commands:", 1)[1].strip().splitlines()
        assert len(listed) >= 5, out
        cut = [line for line in listed if line.rstrip().endswith(("...", "…"))]
        assert not cut, "\n".join(cut)


async def test_models_lists_every_model_and_whether_its_provider_answers(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "openai/fake-model",
                                "fallbackModels": ["backup/small", "openai/fake-model-2"],
                                "modelPresets": {"deep": "anthropic/claude-x", "cheap": "nokey/tiny"}}},
        "providers": {"openai": {"apiBase": fake_llm.base_url}, "backup": {"apiBase": dead},
                      "anthropic": {"apiKey": "sk-ant-probe-0123456789"}, "nokey": {}},
    }))
    code, out, err = await lucid("models", "--config", str(config), home=tmp_path,
                                 env={"COLUMNS": "200", "ANTHROPIC_API_KEY": "", "NOKEY_API_KEY": ""})
    assert code == 0, err
    lines = {line.split()[1]: line for line in out.splitlines() if line.strip() and len(line.split()) > 3}
    assert "yes" in lines["default"]  # GET <apiBase>/models answered
    assert "unreachable (ConnectError)" in out  # the backup provider's port is closed
    assert "API key set (hosted; not probed)" in out and "no API key" in out
    assert out.count("preset") == 2 and out.count("fallback") == 2


def test_the_command_line_builds_only_the_command_it_runs() -> None:
    """``main`` narrows the app to the command named on the line (typer builds the
    parameters of every registered command first); anything else keeps the whole app."""
    import typer.main

    from lucidgate.gateway.cli import build_app, narrowed

    everything = typer.main.get_command(build_app())
    names = set(everything.commands)  # type: ignore[attr-defined]
    assert {"agent", "gateway", "memory", "status", "import", "service", "console", "doctor"} <= names
    for name in names:
        only = typer.main.get_command(narrowed(build_app(), name))
        assert set(only.commands) == {name}, name  # type: ignore[attr-defined]
        assert [p.name for p in only.commands[name].params] == \
            [p.name for p in everything.commands[name].params], name  # type: ignore[attr-defined]
    for other in ("", "--help", "--version", "nosuch", "-c"):
        assert set(typer.main.get_command(narrowed(build_app(), other)).commands) == names, other


async def test_status_with_a_missing_config_file_says_so_and_shows_no_other_workspace(tmp_path: Path) -> None:
    code, out, err = await lucid("status", "-c", str(tmp_path / "missing.json"), home=tmp_path)
    assert code == 2 and "missing.json does not exist" in err, (out, err)
    assert "workspace:" not in out and "gateway:" not in out
    assert not (tmp_path / "missing.json").exists()


async def test_memory_diff_and_restore_name_their_argument_plainly(tmp_path: Path) -> None:
    for command in ("diff", "restore"):
        code, out, err = await lucid("memory", command, "--help", home=tmp_path)
        assert code == 0, err
        # typer braces a required argument in the usage line; the name and its help say what it is.
        assert f"lucid memory {command} [OPTIONS] {{SHA}}" in out and "{sha}" not in out, out
        assert "as `lucid memory log` lists it" in out, out


async def test_an_unknown_option_suggests_only_a_near_miss(tmp_path: Path) -> None:
    code, _, err = await lucid("agent", "--bogus", home=tmp_path)
    assert code == 2 and "No such option: --bogus" in err and "Possible options" not in err, err
    code, _, err = await lucid("agent", "--verbos", home=tmp_path)
    assert code == 2 and "(Possible options: --verbose)" in err, err


async def test_a_config_made_through_the_variable_says_so(tmp_path: Path) -> None:
    """``-c missing.json`` is refused; ``LUCIDGATE_CONFIG`` naming a missing file is a first
    start (a service, a container): the file is made, and stderr names the variable."""
    path = tmp_path / "missing.json"
    code, _, err = await lucid("agent", "-m", "hi", home=tmp_path, env={"LUCIDGATE_CONFIG": str(path)})
    assert path.exists(), err
    assert f"first run: wrote a default config to {path} (LUCIDGATE_CONFIG names it" in err, err
    assert "No model is configured yet" in err and code != 0
