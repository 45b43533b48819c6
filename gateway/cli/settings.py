"""``lucid config show``: the configuration as the gateway sees it.

The config file holds only what differs from the defaults (``lucid onboard`` writes a short
one), so ``show`` prints what is set — the file and ``LUCIDGATE_*`` variables together — and
``--defaults`` the whole effective configuration, every key with its value. Secrets are
printed as ``**********``: the output is safe to paste into a bug report.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lucidgate.gateway.cli._common import ConfigOption, load_or_exit, missing_explicit_config


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Show the configuration (file, environment and defaults).",
                             no_args_is_help=True)
    config_app.command("show")(show)
    app.add_typer(config_app, name="config")


def show(
    defaults: Annotated[bool, typer.Option(
        "--defaults", help="Every key with its effective value, defaults included.")] = False,
    config_path: ConfigOption = None,
) -> None:
    """Print the effective configuration as JSON (secrets masked); only what is set, unless --defaults."""
    missing = missing_explicit_config(config_path)
    if missing:
        typer.echo(f"config error: {missing}", err=True)
        raise typer.Exit(2)
    config = load_or_exit(config_path)
    document = config.model_dump(mode="json", by_alias=True, exclude_defaults=not defaults)
    typer.echo(json.dumps(document if defaults else _pruned(document), indent=2, ensure_ascii=False))


def _pruned(node: object) -> object:
    """``node`` without the sections left empty once defaults are dropped."""
    if not isinstance(node, dict):
        return node
    kept = {key: _pruned(value) for key, value in node.items()}
    return {key: value for key, value in kept.items() if value != {}}
