"""Operator commands: ``lucid doctor``, ``lucid service install``, ``lucid backup``/``restore``,
``lucid healthcheck`` (for container health checks). Each delegates to ``gateway.ops``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from lucidgate.gateway.cli._common import AgentOption, ConfigOption, console, err_console

if TYPE_CHECKING:
    from lucidgate.config import Config


def register(app: typer.Typer) -> None:
    app.command()(doctor)
    app.command()(healthcheck)
    app.command()(backup)
    app.command()(restore)
    service = typer.Typer(help="Run lucid as a systemd service.", no_args_is_help=True)
    service.command("install")(service_install)
    app.add_typer(service, name="service")


def doctor(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check the setup (config, workspace, model, channels, port, disk, stores) and say how to fix it."""
    import asyncio
    import logging

    from lucidgate.gateway.ops import doctor as doc

    # The findings are the list below: a failing probe's own warning (the model call, a
    # channel's API) would otherwise print first, unformatted, through logging's last resort.
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        results = asyncio.run(doc.run_checks(config_path))
    finally:
        logging.disable(previous)  # in-process callers (tests, the console) keep their logs
    if as_json:
        console.print_json(json.dumps(doc.as_json(results)))
    else:
        console.print(doc.render(results), markup=False, highlight=False)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


def healthcheck(
    config_path: ConfigOption = None,
    url: Annotated[Optional[str], typer.Option(
        "--url", help="Base URL to check (default: the gateway running on this config's workspace).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds.")] = 5.0,
) -> None:
    """Exit 0 when this workspace's gateway answers /healthz (Docker HEALTHCHECK; needs no curl)."""
    import httpx

    if url is None:
        url = _own_gateway_url(config_path)
    try:
        response = httpx.get(url.rstrip("/") + "/healthz", timeout=timeout)
    except httpx.HTTPError as exc:
        err_console.print(f"unhealthy: {url} unreachable ({type(exc).__name__})", markup=False)
        raise typer.Exit(1) from None
    if response.status_code != 200:
        err_console.print(f"unhealthy: {url}/healthz answered HTTP {response.status_code}", markup=False)
        raise typer.Exit(1)
    console.print(f"healthy: {url}", markup=False)


def _own_gateway_url(config_path: Path | None) -> str:
    """The URL the gateway of this config's workspace published; exit 1 when none runs there.

    Not the configured port alone: another gateway (another user's, another job's) may answer
    there, and this workspace's gateway would then be reported healthy while it is down."""
    from lucidgate.gateway.cli._common import load_or_exit
    from lucidgate.gateway.daemon.local_client import find_running

    config = load_or_exit(config_path)
    running = find_running(config.workspace)
    if running is None:
        err_console.print(f"unhealthy: no gateway is running on the workspace {config.workspace} "
                          "(or it has not finished starting)", markup=False)
        raise typer.Exit(1)
    return running[0]



AllAgents = Annotated[bool, typer.Option("--all", help="Every agent of agents.list (a folder per agent).")]


def backup(
    config_path: ConfigOption = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Archive to write (.tar.gz).")] = None,
    with_secrets: Annotated[bool, typer.Option("--with-secrets", help="Keep API keys and tokens in it.")] = False,
    agent: AgentOption = None,
    all_agents: AllAgents = False,
) -> None:
    """Archive config and workspace (memory, transcripts, git history); safe while the gateway runs.

    With agents.list: the default agent, or --agent ID, or --all agents, each in its own folder.
    """
    import time

    from lucidgate.config import resolve_config_path
    from lucidgate.gateway.cli._common import load_or_exit
    from lucidgate.gateway.ops.backup import BackupError, create_backup

    config = load_or_exit(config_path)
    agents = _chosen_agents(config, agent, all_agents)
    target = out or Path(f"lucidgate-backup-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    try:
        manifest = create_backup(config, resolve_config_path(config_path), target, include_secrets=with_secrets,
                                 agents=agents)
    except BackupError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    note = "secrets included: keep it private" if with_secrets else "secrets left out (add --with-secrets to keep them)"
    whose = f"; agents {', '.join(agents)}" if agents else ""
    console.print(f"wrote {target} ({manifest['files']} files{whose}; {note})", markup=False)
    if manifest.get("not_taken"):
        console.print(f"not in it: {', '.join(manifest['not_taken'])} (a backup holds memory, transcripts, "
                      "skills, usage and media; never the gateway's state or a channel's login — copy "
                      "anything else yourself)", markup=False)


def _chosen_agents(config: Config, agent: str | None, all_agents: bool) -> list[str] | None:
    """The agents a backup takes: None without agents.list (the one workspace, as always);
    else --all, --agent ID (checked) or the default agent."""
    from lucidgate.gateway.cli._common import agent_or_exit

    if agent is not None and all_agents:
        err_console.print("give either --agent ID or --all, not both", markup=False)
        raise typer.Exit(2)
    agent_or_exit(config, agent)  # an unknown id: exit 2 naming the agents
    if not config.agents.entries:
        return None
    return config.agent_ids() if all_agents else [agent or config.default_agent_id]


def restore(
    archive: Annotated[Path, typer.Argument(help="A file written by `lucid backup`.")],
    to: Annotated[Optional[Path], typer.Option("--to", help="A new or empty directory for a copy "
                                               "(default: lucidgate-restored).")] = None,
    agent: Annotated[Optional[str], typer.Option(
        "--agent", metavar="ID", help="Restore this agent into its own (empty) workspace of the config.")] = None,
    all_agents: Annotated[bool, typer.Option("--all", help="Restore every agent of the archive into its own "
                                             "(empty) workspace of the config.")] = False,
    config_path: ConfigOption = None,
) -> None:
    """Unpack a backup into an empty directory, or agents into their own empty workspaces (never over live data)."""
    if agent is not None or all_agents:
        if to is not None or (agent is not None and all_agents):
            err_console.print("give one of --to DIR, --agent ID or --all", markup=False)
            raise typer.Exit(2)
        _restore_agents(archive, agent, config_path)
        return
    from lucidgate.gateway.ops.backup import BackupError, restore_backup

    to = to or Path("lucidgate-restored")
    try:
        manifest = restore_backup(archive, to)
    except BackupError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    config = (to / "config.json").resolve()
    console.print(f"restored the backup of {manifest['created']} into {to.resolve()}", markup=False)
    if manifest.get("agents"):
        console.print(f"agents {', '.join(manifest['agents'])}: each in {to.resolve() / 'agents'}/<id>; the "
                      "config there points every agent of agents.list at such a folder", markup=False)
    _restore_notes(manifest)
    if not manifest.get("secrets"):
        console.print(f"secrets were not in the backup: put them back in {config} "
                      "(`lucid onboard --webhook-token -c ...` makes a new webhook token)", markup=False)
    console.print(f"check it: lucid doctor -c {config}\nrun it:   lucid gateway -c {config}", markup=False)


def _restore_agents(archive: Path, agent: str | None, config_path: Path | None) -> None:
    from lucidgate.gateway.cli._common import agent_or_exit, load_or_exit
    from lucidgate.gateway.ops.backup import BackupError
    from lucidgate.gateway.ops.backup_agents import restore_agents

    config = load_or_exit(config_path)
    agent_or_exit(config, agent)  # an unknown id: exit 2 naming the agents
    try:
        manifest = restore_agents(archive, config, [agent] if agent is not None else None)
    except BackupError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    for agent_id, place in manifest["restored"].items():
        console.print(f"restored agent {agent_id} from the backup of {manifest['created']} into {place}",
                      markup=False)
    _restore_notes(manifest)
    console.print("the config was not changed; start the gateway again to serve the restored memory", markup=False)


def _restore_notes(manifest: dict[str, Any]) -> None:
    for left in manifest.get("left_out", []):
        console.print(f"left out {left}: a restore never unpacks a repository or the gateway's state "
                      "(pairings, owner sessions, jobs); re-pair and re-create reminders", markup=False)
    console.print("a backup holds no channel login: each channel will log in again at the first start "
                  "(with the token or password in the config)", markup=False)
    for warning in manifest.get("warnings", []):
        err_console.print(f"warning: {warning}", markup=False)


def service_install(
    config_path: ConfigOption = None,
    user_mode: Annotated[bool, typer.Option("--user", help="A user service (systemctl --user), no root needed.")]
    = False,
    print_only: Annotated[bool, typer.Option("--print", help="Print the unit instead of writing it.")] = False,
    unit_dir: Annotated[Optional[Path], typer.Option("--unit-dir", help="Where to write the unit.", hidden=True)]
    = None,
) -> None:
    """Write a hardened systemd unit for this installation and say how to enable it."""
    from lucidgate.gateway.cli._common import load_or_exit
    from lucidgate.gateway.ops import service

    config = load_or_exit(config_path)
    spec = service.spec_for(config, config_path, user_mode=user_mode)
    text = service.render_unit(spec)
    if notice := service.root_notice(spec):
        err_console.print(notice, markup=False)
    if print_only:
        console.print(text, markup=False, highlight=False, end="")
        return
    try:
        path = service.install(text, user_mode=user_mode, unit_dir=unit_dir)
    except OSError as exc:
        err_console.print(f"error: cannot write the unit ({exc.strerror}: {exc.filename}); "
                          "run it with sudo, or use --user, or --print and copy it yourself", markup=False)
        raise typer.Exit(1) from None
    console.print(f"wrote {path}", markup=False)
    verdict = service.verify(path, user_mode=user_mode)
    if verdict:
        console.print(verdict, markup=False)
    for line in service.next_steps(user_mode):
        console.print(line, markup=False)
