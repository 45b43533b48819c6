"""``lucid status``: where the config and workspace are, the model, and whether it answers."""

from __future__ import annotations

import typer

from channels.outbox import read_counts
from config import Config, resolve_config_path
from gateway.cli import recall
from gateway.cli._common import ConfigOption, console, provider_help, workspace_parts


def register(app: typer.Typer) -> None:
    app.command()(status)


def status(config_path: ConfigOption = None) -> None:
    """Show config path, workspace, model, provider reachability and session count."""
    parts = workspace_parts(config_path)
    config = parts.config
    path = resolve_config_path(config_path)
    sessions_dir = parts.sessions.dir
    count = len(list(sessions_dir.glob("*.jsonl"))) if sessions_dir.exists() else 0
    console.print(f"config:    {path} ({'found' if path.exists() else 'missing — run lucid onboard'})")
    console.print(f"workspace: {config.workspace}")
    console.print(f"model:     {config.agent.model}")
    console.print(f"provider:  {_reachability(config)}")
    console.print(f"sessions:  {count}")
    console.print(f"exec:      sandbox {_sandbox_line(config)}")
    console.print(f"recall:    {recall.status_line(config)}", markup=False, highlight=False)
    console.print(f"gateway:   {_gateway_state(config)}")
    outbox = read_counts(parts.outbox_path)
    console.print("outbox:    " + ("empty" if outbox is None else
                                   f"{outbox['pending']} pending, {outbox['dead']} dead-lettered"))
    if provider_help(config):  # scripts: non-zero until a model is configured
        raise typer.Exit(1)


def _gateway_state(config: Config) -> str:
    """Whether a gateway runs on this workspace (its state/local.json and /healthz)."""
    import httpx

    from gateway.daemon.local_client import find_running

    running = find_running(config.workspace)
    if running is None:
        return "not running (start it with `lucid gateway` or the service)"
    try:
        alive = httpx.get(f"{running[0]}/healthz", timeout=3).status_code == 200
    except httpx.HTTPError:
        alive = False
    return f"running at {running[0]}" if alive else f"not answering at {running[0]} (hung? see `lucid doctor`)"


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


def _sandbox_line(config: Config) -> str:
    from gateway.tools._sandbox import describe, unsandboxed_reach

    active, line = describe(config.tools.exec.sandbox, config.tools.exec.network)
    return line if active else f"NOT ACTIVE — {line}; commands {unsandboxed_reach()}"
