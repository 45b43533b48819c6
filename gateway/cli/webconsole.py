"""``lucid console``: print a one-time login link for the web console.

``lucid gateway`` prints one too when it starts in a terminal, so a newcomer opens the
printed address and is logged in; under systemd or Docker (no terminal) it prints the
plain address and ``lucid console`` makes a link on demand.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lucidgate.gateway.cli._common import ConfigOption, console, err_console, load_or_exit

if TYPE_CHECKING:
    from lucidgate.config import Config


def register(app: typer.Typer) -> None:
    app.command("console")(console_link)


def console_link(
    config_path: ConfigOption = None,
    minutes: Annotated[Optional[float], typer.Option("--minutes", "-m", min=0.5, max=1440,
                                                     help="How long the link works (default console.loginLinkTtlMin).")] = None,
) -> None:
    """Print a link that logs this browser into the web console once (no token to paste)."""
    from lucidgate.gateway.console.links import LoginLinks
    from lucidgate.gateway.daemon.local_client import find_running

    config = load_or_exit(config_path)
    if not config.console.enabled:
        err_console.print("the web console is off (console.enabled is false in the config)")
        raise typer.Exit(1)
    ttl_min = minutes if minutes is not None else config.console.login_link_ttl_min
    code = LoginLinks(config.workspace).issue(ttl_min * 60)
    running = find_running(config.workspace)
    if running is not None:
        url = running[0]
    else:
        from lucidgate.gateway.daemon.urls import local_url

        url = local_url(config.gateway.host, config.gateway.port)
    console.print(f"{url}/#login={code}", markup=False, highlight=False, soft_wrap=True)
    err_console.print(f"open it in your browser: it works once, within {ttl_min:g} minutes"
                      + ("" if running else " (the gateway is not running: start `lucid gateway` first)"),
                      highlight=False)


def announcement(config: Config, url: str) -> str:
    """The line ``lucid gateway`` prints: a login link in a terminal, else the address."""
    if not config.console.enabled:
        return "web console: off (console.enabled is false)"
    if not sys.stdout.isatty():
        return f"web console: {url}/ (log in with `lucid console` or console.token)"
    from lucidgate.gateway.console.links import LoginLinks

    code = LoginLinks(config.workspace).issue(config.console.login_link_ttl_min * 60)
    return (f"web console: {url}/#login={code} (works once, for {config.console.login_link_ttl_min:g} min; "
            "`lucid console` prints a new one)")
