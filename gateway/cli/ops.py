"""Operator commands: ``lucid doctor``, ``lucid service install``, ``lucid backup``/``restore``,
``lucid healthcheck`` (for container health checks). Each delegates to ``gateway.ops``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from lucidgate.gateway.cli._common import ConfigOption, console, err_console


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



def backup(
    config_path: ConfigOption = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Archive to write (.tar.gz).")] = None,
    with_secrets: Annotated[bool, typer.Option("--with-secrets", help="Keep API keys and tokens in it.")] = False,
) -> None:
    """Archive config and workspace (memory, transcripts, git history); safe while the gateway runs."""
    import time

    from lucidgate.config import resolve_config_path
    from lucidgate.gateway.cli._common import load_or_exit
    from lucidgate.gateway.ops.backup import BackupError, create_backup

    config = load_or_exit(config_path)
    target = out or Path(f"lucidgate-backup-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    try:
        manifest = create_backup(config, resolve_config_path(config_path), target, include_secrets=with_secrets)
    except BackupError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    note = "secrets included: keep it private" if with_secrets else "secrets left out (add --with-secrets to keep them)"
    console.print(f"wrote {target} ({manifest['files']} files; {note})", markup=False)
    if manifest.get("not_taken"):
        console.print(f"not in it: {', '.join(manifest['not_taken'])} (a backup holds memory, transcripts, "
                      "skills, usage and media; never the gateway's state or a channel's login — copy "
                      "anything else yourself)", markup=False)


def restore(
    archive: Annotated[Path, typer.Argument(help="A file written by `lucid backup`.")],
    to: Annotated[Path, typer.Option("--to", help="A new or empty directory.")] = Path("lucidgate-restored"),
) -> None:
    """Unpack a backup into an empty directory (never over live data)."""
    from lucidgate.gateway.ops.backup import BackupError, restore_backup

    try:
        manifest = restore_backup(archive, to)
    except BackupError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    config = (to / "config.json").resolve()
    console.print(f"restored the backup of {manifest['created']} into {to.resolve()}", markup=False)
    for left in manifest.get("left_out", []):
        console.print(f"left out {left}: a restore never unpacks a repository or the gateway's state "
                      "(pairings, owner sessions, jobs); re-pair and re-create reminders", markup=False)
    console.print("a backup holds no channel login: each channel will log in again at the first start "
                  "(with the token or password in the config)", markup=False)
    for warning in manifest.get("warnings", []):
        err_console.print(f"warning: {warning}", markup=False)
    if not manifest.get("secrets"):
        console.print(f"secrets were not in the backup: put them back in {config} "
                      "(`lucid onboard --webhook-token -c ...` makes a new webhook token)", markup=False)
    console.print(f"check it: lucid doctor -c {config}\nrun it:   lucid gateway -c {config}", markup=False)


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
