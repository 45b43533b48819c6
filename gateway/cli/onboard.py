"""``lucid onboard``: write the config and the workspace templates, never overwriting."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lucidgate.config import resolve_config_path
from lucidgate.gateway.cli._common import ConfigOption, console, err_console, load_or_exit, provider_help


def register(app: typer.Typer) -> None:
    app.command()(onboard)


def onboard(
    config_path: ConfigOption = None,
    webhook_token: Annotated[bool, typer.Option(
        "--webhook-token", help="Generate a new webhook token in the config and print it.")] = False,
    webhook_owner_token: Annotated[bool, typer.Option(
        "--webhook-owner-token",
        help="Generate a new webhook owner token (channels.webhook.ownerToken) and print it.")] = False,
    channel: Annotated[Optional[str], typer.Option(
        "--channel", metavar="NAME",
        help="Set up one channel (email, dingtalk, telegram, slack, discord, matrix): asks for its settings, "
             "writes them, switches it on and checks it.")] = None,
    set_values: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY=VALUE",
        help="With --channel: set a key of channels.NAME (camelCase) instead of asking; repeat it. "
             "Lists are comma-separated.")] = None,
) -> None:
    """Create the config file and workspace templates (never overwrites your files)."""
    from lucidgate.config.onboard import install_templates, workspace_beside, write_config

    path = resolve_config_path(config_path)
    if channel is not None or set_values:
        from lucidgate.gateway.cli._onboard_channel import onboard_channel

        onboard_channel(path, config_path, channel, set_values or [])
        return
    if webhook_token or webhook_owner_token:
        _new_webhook_token(path, "ownerToken" if webhook_owner_token else "token")
        return
    if write_config(path, workspace_beside(path) if config_path is not None else None):
        console.print(f"wrote {path} (webhook token generated; edit it to add your model key)")
    else:
        console.print(f"{path} exists; left as it is")
    config = load_or_exit(path)
    written = install_templates(config.workspace)
    console.print(f"workspace {config.workspace}: " + (", ".join(written) if written else "all files present"))
    hint = provider_help(config, path)
    if hint:
        console.print(hint)


def _new_webhook_token(path: Path, key: str) -> None:
    import os

    from lucidgate.config.onboard import new_webhook_token

    try:
        token = new_webhook_token(path, key)
    except ValueError as exc:
        err_console.print(f"[red]config error[/red]: {exc}")
        raise typer.Exit(2) from None
    what = "owner token" if key == "ownerToken" else "token"
    err_console.print(f"new webhook {what} written to {path} (restart the gateway to use it):", markup=False)
    console.print(token, markup=False, highlight=False)
    env = "LUCIDGATE_CHANNELS__WEBHOOK__" + ("OWNER_TOKEN" if key == "ownerToken" else "TOKEN")
    if os.environ.get(env):
        err_console.print(f"note: {env} is set and overrides the file", markup=False)
