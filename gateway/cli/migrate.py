"""``lucid import nanobot|openclaw|lucid`` and ``lucid export``: move an assistant in or out.

Imports hold the workspace lock (like the gateway does), so they never race a running
gateway: stop it, import, start it again. ``--dry-run`` prints the plan and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lucidgate.gateway.cli._common import (AgentOption, ConfigOption, agent_or_exit, console, ensure_onboarded,
                                           err_console, escape, load_or_exit)

if TYPE_CHECKING:
    from lucidgate.config.schema import Config
    from lucidgate.gateway.migrate import ImportReport, Source
    from lucidgate.gateway.daemon.workspace_lock import WorkspaceLock

DryRun = Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing.")]
Channels = Annotated[bool, typer.Option("--channels", help="Also write the offered channel settings "
                                                          "(tokens, allowFrom) into the config.")]


def register(app: typer.Typer) -> None:
    import_app = typer.Typer(help="Bring an existing assistant over (memory, history, sessions, skills).",
                             no_args_is_help=True)
    import_app.command("nanobot")(import_nanobot)
    import_app.command("openclaw")(import_openclaw)
    import_app.command("lucid")(import_lucid)
    app.add_typer(import_app, name="import")
    app.command("export")(export)


def import_nanobot(path: Annotated[Optional[Path], typer.Argument(help="Default ~/.nanobot")] = None,
                   dry_run: DryRun = False, channels: Channels = False, config_path: ConfigOption = None) -> None:
    """Import a nanobot assistant (SOUL/USER/MEMORY merged, history, sessions, skills)."""
    from lucidgate.gateway.migrate.nanobot import read_nanobot

    _run_import(lambda: read_nanobot(path or Path.home() / ".nanobot"), dry_run, channels, config_path)


def import_openclaw(path: Annotated[Optional[Path], typer.Argument(help="Default ~/.openclaw")] = None,
                    dry_run: DryRun = False, channels: Channels = False, config_path: ConfigOption = None) -> None:
    """Import an OpenClaw assistant (memory files, daily notes, sessions, skills)."""
    from lucidgate.gateway.migrate.openclaw import read_openclaw

    _run_import(lambda: read_openclaw(path or Path.home() / ".openclaw"), dry_run, channels, config_path)


def import_lucid(file: Annotated[Path, typer.Argument(help="An archive written by `lucid export`.")],
                 dry_run: DryRun = False, config_path: ConfigOption = None, agent: AgentOption = None,
                 all_agents: Annotated[bool, typer.Option("--all", help="Every agent the archive holds, each "
                                                          "into its own workspace.")] = False) -> None:
    """Restore a `lucid export` archive (exactly, into a fresh workspace; merged otherwise).

    An archive of agents goes to the same agents only: the default one, --agent ID or --all.
    """
    from lucidgate.gateway.migrate.archive import ExtractedArchive

    root = ensure_onboarded(config_path)
    try:
        with ExtractedArchive(file) as unpacked:
            for agent_id, source in _import_targets(root, unpacked, agent, all_agents, file):
                if agent_id is not None:
                    console.print(f"agent {agent_id}:", markup=False)
                _import_one(agent_or_exit(root, agent_id), source, file, dry_run)
    except (ValueError, FileNotFoundError) as exc:
        err_console.print(f"[red]import failed[/red]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None


def _import_targets(root: Config, unpacked: Path, agent: str | None, all_agents: bool,
                    file: Path) -> list[tuple[str | None, Path]]:
    """(agent, folder holding its ``workspace/`` and ``memory.bundle``) for each agent to fill.
    An archive of one workspace goes to the agent named (the default one without --agent);
    one of agents only to the same agents. Raises ValueError naming both sides."""
    import json

    if agent is not None and all_agents:
        raise ValueError("give either --agent ID or --all, not both")
    agent_or_exit(root, agent)  # an unknown id: exit 2 naming the agents
    held = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8")).get("agents")
    if not isinstance(held, dict):
        if all_agents:
            raise ValueError(f"{file} holds one workspace, not agents: import it with --agent ID")
        return [(agent, unpacked)]
    known = root.agent_ids()
    wanted = list(held) if all_agents else [agent or root.default_agent_id]
    missing = [a for a in wanted if a not in held]
    if missing:
        raise ValueError(f"{file} holds agent(s) {', '.join(held)}, not {', '.join(missing)}: an agent's export "
                         "is imported only into that agent (name it with --agent)")
    unknown = [a for a in wanted if a not in known]
    if unknown:
        raise ValueError(f"this config has no agent {', '.join(unknown)} (its agents: {', '.join(known)}); "
                         "add it to agents.list first")
    return [(a, unpacked / "agents" / a) for a in wanted]


def _import_one(config: Config, source: Path, file: Path, dry_run: bool) -> None:
    """One workspace from ``source`` into ``config``'s: exactly when fresh, merged otherwise."""
    from lucidgate.gateway.migrate.archive import is_fresh, read_lucid, restore_fresh
    from lucidgate.gateway.stores import WorkspaceParts

    git = WorkspaceParts(config).git
    with _locked(config.workspace):
        if is_fresh(git):
            if dry_run:
                console.print(f"would restore {file} into the fresh workspace {config.workspace}")
                return
            warnings: list[str] = []
            restored = restore_fresh(source, git, warnings)
            console.print(f"restored {len(restored)} file(s) and the memory history into {config.workspace}")
            for warning in warnings:
                err_console.print(f"warning: {warning}", markup=False, soft_wrap=True)
            console.print("config.json in the archive has no secrets; set tokens and keys here yourself")
            return
        import asyncio

        _report(asyncio.run(_apply(read_lucid(source), config, dry_run, None, False)), dry_run)


def export(out: Annotated[Path, typer.Option("--out", "-o", help="Archive to write (.tar.gz).")],
           config_path: ConfigOption = None, agent: AgentOption = None,
           all_agents: Annotated[bool, typer.Option("--all", help="Every agent of agents.list "
                                                    "(a folder per agent).")] = False) -> None:
    """Write a portable archive: memory, history, sessions, skills, git history, config without secrets.

    With agents.list: the default agent, or --agent ID, or --all agents, each in its own folder.
    """
    from lucidgate.gateway.migrate.archive import export_agents, export_archive
    from lucidgate.gateway.stores import WorkspaceParts

    if agent is not None and all_agents:
        err_console.print("give either --agent ID or --all, not both")
        raise typer.Exit(2)
    config = load_or_exit(config_path)
    agent_or_exit(config, agent)
    if not config.agents.entries:  # one workspace, as always
        stores = WorkspaceParts(config)
        members = export_archive(config, out.expanduser(), git=stores.git, tombstones=stores.tombstones)
        console.print(f"wrote {out} ({len(members)} item(s); secrets left out)")
        return
    ids = config.agent_ids() if all_agents else [agent or config.default_agent_id]
    parts = {a: WorkspaceParts(config.for_agent(a)) for a in ids}
    workspaces = {a: (p.workspace, p.git, p.tombstones) for a, p in parts.items()}
    manifest = export_agents(config, out.expanduser(), workspaces)
    items = sum(len(a["files"]) for a in manifest["agents"].values())
    console.print(f"wrote {out} (agents {', '.join(ids)}; {items} item(s); secrets left out)")


def _run_import(read: Callable[[], Source], dry_run: bool, channels: bool, config_path: Path | None) -> None:
    import asyncio

    from lucidgate.config import resolve_config_path

    config = ensure_onboarded(config_path)
    try:
        source = read()
        with _locked(config.workspace):
            report = asyncio.run(_apply(source, config, dry_run, resolve_config_path(config_path), channels))
    except (ValueError, FileNotFoundError) as exc:
        err_console.print(f"[red]import failed[/red]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    _report(report, dry_run)


async def _apply(source: Source, config: Config, dry_run: bool, config_file: Path | None,
                 channels: bool) -> ImportReport:
    from lucidgate.gateway.migrate.apply import import_source
    from lucidgate.gateway.stores import WorkspaceParts

    stores = WorkspaceParts(config)  # configured as the gateway's: timezone, history limit
    return await import_source(source, stores.memory, stores.git, dry_run=dry_run, config_path=config_file,
                               apply_channels=channels)


def _locked(workspace: Path) -> _Release:
    from lucidgate.gateway.daemon.workspace_lock import GatewayLocked, WorkspaceLock

    lock = WorkspaceLock(workspace, "import")
    try:
        lock.acquire()
    except GatewayLocked as exc:
        err_console.print(f"[red]cannot import now[/red]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    return _Release(lock)


class _Release:
    def __init__(self, lock: WorkspaceLock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def _report(report: ImportReport, dry_run: bool) -> None:
    prefix = "would " if dry_run else ""
    for action in report.actions:
        console.print(f"{prefix}{action}", markup=False, soft_wrap=True)
    for warning in report.warnings:
        err_console.print(f"warning: {warning}", markup=False)
    if report.offers:
        console.print("channel settings found:" + ("" if not dry_run else " (not written in a dry run)"))
        for offer in report.offers:
            console.print(f"  {offer}", markup=False)
    if not report.actions and not report.offers:
        console.print("nothing to import: everything is already here")
    elif report.commit:
        console.print(f"memory commit {report.commit[:8]}")
