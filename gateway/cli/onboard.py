"""``lucid onboard``: write the config and the workspace templates, never overwriting."""

from __future__ import annotations

import typer

from config import resolve_config_path
from gateway.cli._common import ConfigOption, console, load_or_exit, provider_help


def register(app: typer.Typer) -> None:
    app.command()(onboard)


def onboard(config_path: ConfigOption = None) -> None:
    """Create the config file and workspace templates (never overwrites your files)."""
    from config.onboard import install_templates, write_config

    path = resolve_config_path(config_path)
    if write_config(path):
        console.print(f"wrote {path} (webhook token generated; edit it to add your model key)")
    else:
        console.print(f"{path} exists; left as it is")
    config = load_or_exit(path)
    written = install_templates(config.workspace)
    console.print(f"workspace {config.workspace}: " + (", ".join(written) if written else "all files present"))
    hint = provider_help(config, path)
    if hint:
        console.print(hint)
