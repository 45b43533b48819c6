"""``lucid pairing approve``: let someone who asked through a chat talk to the assistant."""

from __future__ import annotations

import typer

from lucidgate.gateway.cli._common import ConfigOption, console, err_console, printable, workspace_parts


def register(app: typer.Typer) -> None:
    pairing_app = typer.Typer(help="Approve people who asked to talk to the assistant.", no_args_is_help=True)
    pairing_app.command("approve")(pairing_approve)
    app.add_typer(pairing_app, name="pairing")


def pairing_approve(code: str, config_path: ConfigOption = None) -> None:
    """Allow the person who was given CODE to talk to the assistant."""
    result = workspace_parts(config_path).pairing.approve(code)
    if result is None:
        err_console.print("unknown, used or expired code (codes last one hour)")
        raise typer.Exit(1)
    channel, sender = result
    # A sender id is a stranger's word (a webhook caller picks its own): printed as plain text.
    console.print(printable(f"approved {channel} user {sender}"), markup=False, highlight=False)
