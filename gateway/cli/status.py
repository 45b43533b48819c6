"""``lucid status``: where the config and workspace are, the model, and whether it answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from lucidgate.config.paths import resolve_config_path
from lucidgate.gateway.cli import recall
from lucidgate.gateway.cli._common import (AgentOption, ConfigOption, agent_or_exit, load_or_exit,
                                           missing_explicit_config, provider_help)

if TYPE_CHECKING:
    from lucidgate.config import Config


def register(app: typer.Typer) -> None:
    app.command()(status)


def status(config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Show config path, workspace, model, provider reachability and session count, and the
    agents when there are several (--agent ID: that agent's workspace, model and sessions)."""
    from lucidgate.gateway.stores import WorkspaceParts

    # Plain lines (no rich): paths and URLs print as they are, and the command starts faster.
    missing = missing_explicit_config(config_path)
    if missing:  # not the default workspace's state, as if it were this config's
        typer.echo(f"config error: {missing}", err=True)
        raise typer.Exit(2)
    root = load_or_exit(config_path)
    config = agent_or_exit(root, agent)
    path = resolve_config_path(config_path)
    count = _session_count(config)
    typer.echo(f"config:    {path} ({'found' if path.exists() else 'missing — run lucid onboard'})")
    typer.echo(f"workspace: {config.workspace}")
    typer.echo(f"model:     {config.agent.model}")
    typer.echo(f"provider:  {_reachability(config)}")
    typer.echo(f"sessions:  {count}")
    typer.echo(f"exec:      sandbox {_sandbox_line(config)}")
    typer.echo(f"recall:    {recall.status_line(config)}")
    typer.echo(f"gateway:   {_gateway_state(root)}")
    if len(root.agent_ids()) > 1:
        for line in agent_lines(root):
            typer.echo(line)
    typer.echo(f"channels:  {_channels_line(config)}")
    from lucidgate.channels.outbox import read_counts  # the bus's modules: only for this command

    outbox = read_counts(WorkspaceParts(root).outbox_path)  # the daemon's: the default agent's workspace
    typer.echo("outbox:    " + ("empty" if outbox is None else
                                   f"{outbox['pending']} pending, {outbox['dead']} dead-lettered"))
    if config.channels.email.enabled:
        typer.echo(f"email:     {_email_state(root)}")
    if provider_help(config):  # scripts: non-zero until a model is configured
        raise typer.Exit(1)


def _session_count(config: Config) -> int:
    folder = config.workspace / "sessions"
    return len(list(folder.glob("*.jsonl"))) if folder.exists() else 0


def agent_lines(root: Config) -> list[str]:
    """One line per agent (the default first): id, workspace, model, sessions, Dream's last run,
    and, when the daemon answers, whether it serves the agent and what the agent is doing."""
    from lucidgate.gateway.stores import WorkspaceParts

    served = _served_agents(root)
    lines = [f"agents:    {len(root.agent_ids())} (default {root.default_agent_id})"
             + ("" if served is None else "; the running gateway's view in [ ]")]
    for agent_id in root.agent_ids():
        config = root.for_agent(agent_id)
        dream = _utc(WorkspaceParts(config).job_state.load().get("dream", {}).get("last_run"))
        mark = " (default)" if agent_id == root.default_agent_id else ""
        line = (f"  {agent_id}{mark}: {config.workspace}; model {config.agent.model}; "
                f"{_session_count(config)} sessions; last Dream {dream}")
        if served is not None:
            line += f" [{_served_line(served.pop(agent_id, None))}]"
        lines.append(line)
    for agent_id in served or {}:  # served, but no longer in the config file
        lines.append(f"  {agent_id}: not in the config any more [served; restart the gateway to drop it]")
    return lines


def _utc(value: Any) -> str:
    """A time from the scheduler's state as ``2026-11-02 03:04 UTC``; "never" when there is none."""
    from datetime import datetime, timezone

    try:
        when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        return str(value) if value else "never"
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _served_agents(root: Config) -> dict[str, dict[str, Any]] | None:
    """The running gateway's agents by id, or None when none runs or it cannot say."""
    from lucidgate.gateway.daemon.local_client import agents_running, find_running

    running = find_running(root.workspace)
    found = agents_running(*running) if running is not None else None
    return None if found is None else {str(a["id"]): a for a in found}


def _served_line(agent: dict[str, Any] | None) -> str:
    if agent is None:
        return "not served: the gateway started before this agent was added; restart it"
    state = "serving" if agent.get("alive") else "NOT RUNNING (see `lucid doctor` and the log)"
    return f"{state}, {agent.get('active_turns', 0)} turn(s) running, {agent.get('queued', 0)} queued"


def _email_state(config: Config) -> str:
    """The email channel's mailbox and how far its intake got (``state/email.json``)."""
    import json

    section = config.channels.email
    where = f"{section.address or '(no address)'} via {section.imap_host or '(no imapHost)'}/{section.folder}"
    try:
        state = json.loads((config.workspace / "state" / "email.json").read_text(encoding="utf-8"))
        return f"{where}, mail up to UID {int(state['last_uid'])} handled"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{where}, not read yet (starts with the gateway)"


def _http_status(url: str, *, timeout: float, headers: dict[str, str] | None = None,
                 direct: bool = False) -> int:
    """The HTTP status of a GET, through the standard library: httpx's client builds an SSL
    context at start (~0.2 s) that a status line on plain http does not need. ``direct``
    ignores proxy settings (loopback). Raises ``OSError`` (``URLError`` is one) or
    ``http.client.HTTPException`` when nothing answers."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({})) if direct else \
        urllib.request.build_opener()
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:  # an answer all the same
        return int(exc.code)


def _why(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else type(exc).__name__


def _channels_line(config: Config) -> str:
    """The platform channels the config switches on (what a started gateway would build)."""
    from lucidgate.channels.registry import enabled_channels

    return ", ".join(enabled_channels(config)) or "none enabled"


def _gateway_state(config: Config) -> str:
    """Whether a gateway runs on this workspace (its state/local.json and /healthz)."""
    from lucidgate.gateway.daemon.local_client import find_running

    running = find_running(config.workspace)
    if running is None:
        return "not running (start it with `lucid gateway` or the service)"
    from http.client import HTTPException

    try:
        alive = _http_status(f"{running[0]}/healthz", timeout=3, direct=True) == 200
    except (OSError, HTTPException, ValueError):
        alive = False
    return f"running at {running[0]}" if alive else f"not answering at {running[0]} (hung? see `lucid doctor`)"


def _reachability(config: Config) -> str:
    from http.client import HTTPException

    hint = provider_help(config)
    if hint:
        return "not configured (run lucid onboard for instructions)"
    name, provider = config.provider_for(config.agent.model)
    base = provider.api_base if provider else None
    if not base:
        return f"{name}: API key set"
    headers = {}
    key = provider.api_key.get_secret_value() if provider else ""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        return f"{base} answered HTTP {_http_status(base.rstrip('/') + '/models', timeout=3, headers=headers)}"
    except (OSError, HTTPException, ValueError) as exc:
        return f"{base} unreachable ({_why(exc)})"


def _sandbox_line(config: Config) -> str:
    from lucidgate.gateway.tools._sandbox import describe, unsandboxed_reach

    active, line = describe(config.tools.exec.sandbox, config.tools.exec.network)
    return line if active else f"NOT ACTIVE — {line}; commands {unsandboxed_reach()}"
