"""The ``lucid`` command line (typer). Commands parse flags, load config and delegate.

Heavy modules (litellm, the gateway wiring) are imported inside the commands that need
them, so ``lucid --help`` and ``lucid onboard`` stay instant.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Annotated, Optional

import typer
from rich.console import Console

from config import Config, ConfigError, load_config, resolve_config_path

app = typer.Typer(
    name="lucid",
    help="lucidgate — a self-hosted personal AI assistant that remembers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
memory_app = typer.Typer(help="Inspect and undo changes to long-term memory.", no_args_is_help=True)
pairing_app = typer.Typer(help="Approve people who asked to talk to the assistant.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
app.add_typer(pairing_app, name="pairing")

console = Console()
err_console = Console(stderr=True)

ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Config file (default: $LUCIDGATE_CONFIG or ~/.lucidgate/config.json)."),
]


def _load(config_path: Path | None) -> Config:
    try:
        return load_config(config_path)
    except ConfigError as exc:
        err_console.print(f"[red]config error[/red]: {exc}")
        raise typer.Exit(2) from None


def _preload_litellm() -> None:
    """Import litellm in a background thread while the rest starts (it takes seconds)."""
    def load() -> None:
        from gateway.llm import import_litellm

        try:
            import_litellm()
        except Exception:  # surfaced properly at the first call
            pass

    threading.Thread(target=load, name="litellm-import", daemon=True).start()


def provider_help(config: Config, config_path: Path | None = None) -> str:
    """How to configure a model, or "" when one is configured."""
    from gateway.llm import LiteLLMChatModel

    ok, why = LiteLLMChatModel(config).configured()
    if ok:
        return ""
    path = resolve_config_path(config_path)
    return (
        f"No model is configured yet: {why}.\n"
        f"Edit {path} and set, for a hosted model:\n"
        '  "providers": {"openai": {"apiKey": "sk-..."}}\n'
        "or, for a local OpenAI-compatible server (Ollama, llama.cpp, vLLM):\n"
        '  "agents": {"defaults": {"model": "openai/<model-name>"}},\n'
        '  "providers": {"openai": {"apiBase": "http://127.0.0.1:11434/v1"}}\n'
        "or set LUCIDGATE_PROVIDERS__OPENAI__API_KEY in the environment."
    )


@app.command()
def onboard(config_path: ConfigOption = None) -> None:
    """Create the config file and workspace templates (never overwrites your files)."""
    from config.onboard import install_templates, write_config

    path = resolve_config_path(config_path)
    if write_config(path):
        console.print(f"wrote {path} (webhook token generated; edit it to add your model key)")
    else:
        console.print(f"{path} exists; left as it is")
    config = _load(path)
    written = install_templates(config.workspace)
    console.print(f"workspace {config.workspace}: " + (", ".join(written) if written else "all files present"))
    hint = provider_help(config, path)
    if hint:
        console.print(hint)


def _ensure_onboarded(config_path: Path | None) -> Config:
    from config.onboard import install_templates, write_config

    path = resolve_config_path(config_path)
    if not path.exists():
        write_config(path)
        err_console.print(f"first run: wrote a default config to {path}")
    config = _load(path)
    install_templates(config.workspace)
    return config


@app.command()
def agent(
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="Answer this one message and exit.")] = None,
    config_path: ConfigOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show debug logs.")] = False,
) -> None:
    """Chat with the assistant in the terminal (history is kept across runs).

    With `lucid gateway` running on the same workspace, this talks to it (one agent per
    workspace, no start-up cost); otherwise it runs the agent in this process.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    config = _ensure_onboarded(config_path)
    hint = provider_help(config, config_path)
    if hint:
        err_console.print(hint)
        raise typer.Exit(2)
    endpoint = _running_gateway(config)
    if endpoint is not None:
        raise typer.Exit(asyncio.run(_agent_via_gateway(config, endpoint, message)))
    _preload_litellm()
    raise typer.Exit(asyncio.run(_agent_main(config, message)))


Ask = Callable[[str], Awaitable[tuple[bool, str]]]


async def _converse(ask: Ask, message: str | None, banner: str) -> int:
    """One message (exit code 0/1), or a prompt loop until 'exit', Ctrl-D or Ctrl-C."""
    if message is not None:
        ok, text = await ask(message)
        (console if ok else err_console).print(text, markup=False, highlight=False)
        return 0 if ok else 1
    console.print(f"[dim]{banner} — type a message; 'exit' or Ctrl-D to leave.[/dim]")
    while True:
        try:
            line = await asyncio.to_thread(input, "you> ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if line.strip().lower() in ("exit", "quit", ":q"):
            return 0
        if not line.strip():
            continue
        with console.status("thinking…", spinner="dots"):
            ok, text = await ask(line)
        (console if ok else err_console).print(text, markup=False, highlight=False)


async def _agent_main(config: Config, message: str | None) -> int:
    from channels.cli import CliChannel
    from gateway.app import build_gateway
    from gateway.workspace_lock import GatewayLocked, WorkspaceLock

    try:
        lock = WorkspaceLock(config.workspace)
        lock.acquire()
    except GatewayLocked as exc:
        err_console.print(f"{exc}\n(if a gateway is starting up, try again in a few seconds)")
        return 1
    try:
        gw = build_gateway(config, inbox_name="inbox.cli.jsonl")
        cli = CliChannel(gw.bus, on_unsolicited=_print_unsolicited)
        gw.channels["cli"] = cli
        async with gw:
            return await _converse(cli.ask, message, "lucid")
    finally:
        lock.release()


def _print_unsolicited(text: str) -> None:
    """Reminders and `message` tool output that arrive between prompts."""
    console.print(text, markup=False, highlight=False)


def _running_gateway(config: Config) -> tuple[str, str] | None:
    """The local endpoint of a gateway serving this workspace, if one answers its health check."""
    from gateway.local_api import find_running

    endpoint = find_running(config.workspace)
    if endpoint is None:
        return None
    import httpx

    try:
        alive = httpx.get(f"{endpoint[0]}/healthz", timeout=1.5).status_code == 200
    except httpx.HTTPError:
        alive = False
    return endpoint if alive else None


async def _agent_via_gateway(config: Config, endpoint: tuple[str, str], message: str | None) -> int:
    from gateway.local_api import ask_running

    url, token = endpoint
    timeout = config.agent.llm_timeout_s * (config.agent.llm_retries + 1) + 60

    async def ask(text: str) -> tuple[bool, str]:
        result = await asyncio.to_thread(ask_running, url, token, text, timeout_s=timeout)
        return result if result is not None else (False, "the gateway stopped answering; run lucid agent again")

    return await _converse(ask, message, f"lucid (via the gateway at {url})")


@app.command()
def status(config_path: ConfigOption = None) -> None:
    """Show config path, workspace, model, provider reachability and session count."""
    config = _load(config_path)
    path = resolve_config_path(config_path)
    sessions_dir = config.workspace / "sessions"
    count = len(list(sessions_dir.glob("*.jsonl"))) if sessions_dir.exists() else 0
    console.print(f"config:    {path} ({'found' if path.exists() else 'missing — run lucid onboard'})")
    console.print(f"workspace: {config.workspace}")
    console.print(f"model:     {config.agent.model}")
    console.print(f"provider:  {_reachability(config)}")
    console.print(f"sessions:  {count}")


def _reachability(config: Config) -> str:
    import httpx

    hint = provider_help(config)
    if hint:
        return "not configured (run lucid onboard for instructions)"
    name, provider = config.provider_for(config.agent.model)
    base = provider.api_base if provider else None
    if not base:
        return f"{name}: API key set"
    try:
        headers = {}
        key = provider.api_key.get_secret_value() if provider else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        response = httpx.get(base.rstrip("/") + "/models", timeout=3, headers=headers)
        return f"{base} answered HTTP {response.status_code}"
    except httpx.HTTPError as exc:
        return f"{base} unreachable ({type(exc).__name__})"


def main() -> None:
    """Console-script entry point."""
    from gateway._offline import set_offline_environment

    set_offline_environment()
    # Transcripts, memory, journals and state hold private conversations: whatever this
    # process creates is readable by its own user only.
    os.umask(0o077)
    try:
        app()
    except KeyboardInterrupt:
        _fast_exit(130)
    except SystemExit as exc:
        _fast_exit(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
    _fast_exit(0)


def _fast_exit(code: int) -> None:
    """Exit without the interpreter's slow teardown of litellm's import graph (~1 s).

    Every command has finished its work and closed its files by now; flush what is
    buffered (stdio, log handlers) and leave.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


from gateway import cli_memory as _cli_memory  # noqa: E402,F401  (registers memory/dream/usage commands)
from gateway import cli_gateway as _cli_gateway  # noqa: E402,F401  (registers `lucid gateway`)
from gateway import cli_jobs as _cli_jobs  # noqa: E402,F401  (registers `lucid jobs`)
