"""``lucid gateway``: run the daemon (all channels, the agent, health and metrics over HTTP).

The command only parses flags, sets up logging, loads (or on first run writes) the config
and hands over to ``gateway.daemon.serve.run_gateway``; heavy imports happen inside it.
"""

from __future__ import annotations

import logging
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lucidgate.config.errors import ConfigError, LucidError
from lucidgate.config.paths import first_run_note, resolve_config_path
from lucidgate.gateway.cli import webconsole
from lucidgate.gateway.cli._common import (ConfigOption, console, ensure_onboarded, err_console, missing_explicit_config,
                                 preload_litellm, provider_help)

if TYPE_CHECKING:
    from lucidgate.config import Config


class LogFormat(str, Enum):
    text = "text"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("gateway")(run)


def run(
    config_path: ConfigOption = None,
    host: Annotated[Optional[str], typer.Option("--host", help="Listen address (default: gateway.host).")] = None,
    port: Annotated[Optional[int], typer.Option("--port", help="Listen port (default: gateway.port).")] = None,
    log_format: Annotated[LogFormat, typer.Option("--log-format", help="text, or json for journald/Docker.")]
    = LogFormat.text,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    access_log: Annotated[bool, typer.Option("--access-log/--no-access-log", help="Log every HTTP request.")]
    = True,
) -> None:
    """Run the gateway daemon: every enabled channel, the agent, /healthz, /readyz, /metrics."""
    from lucidgate.gateway.logs import secrets_from_config, setup_logging
    from lucidgate.gateway.daemon.serve import run_gateway

    preload_litellm()  # seconds of import, overlapped with start-up instead of the first message
    redactor = setup_logging(level=logging.DEBUG if verbose else logging.INFO, fmt=log_format.value)
    log = logging.getLogger("lucidgate.gateway")
    json_logs = log_format is LogFormat.json
    config = _onboard_logged(config_path, log) if json_logs else ensure_onboarded(config_path)
    from lucidgate.gateway.daemon.secret_env import scrub_secret_env

    scrub_secret_env(config)  # keys now live in the config only: no child or /proc/<pid>/environ has them
    redactor.add(secrets_from_config(config))
    _warn_unsandboxed(config, log, json_logs)
    try:
        if host is not None:
            config.gateway.host = host
        if port is not None:
            config.gateway.port = port
    except ValueError as exc:
        err_console.print(f"[red]invalid option[/red]: {exc}")
        raise typer.Exit(2) from None
    hint = provider_help(config, config_path)
    if hint:  # how to add one; the daemon's own start line says it runs without one
        if json_logs:
            log.warning("%s", hint)
        else:
            err_console.print(hint, markup=False, highlight=False)

    def announce(url: str) -> None:
        lines = []
        if config.channels.webhook.enabled:
            lines.append(f"webhook: POST {url}/v1/messages (Authorization: Bearer <channels.webhook.token>)")
        lines.append(f"health: {url}/healthz  readiness: {url}/readyz  metrics: {url}/metrics  "
                     f"API docs: {url}/docs")
        lines.append(webconsole.announcement(config, url))
        for line in lines:  # in JSON mode every line on the output is a JSON object
            if json_logs:
                log.info("%s", line)
            else:
                console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        code = run_gateway(config, on_listening=announce, access_log=access_log)
    except LucidError as exc:
        if json_logs:
            log.error("%s", exc)
        else:
            err_console.print(f"[red]error[/red]: {exc}", highlight=False)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def _warn_unsandboxed(config: Config, log: logging.Logger, json_logs: bool) -> None:
    """Say loudly at start when exec commands will run without bubblewrap."""
    from lucidgate.gateway.tools._sandbox import describe, unsandboxed_reach

    active, line = describe(config.tools.exec.sandbox, config.tools.exec.network)
    if active or config.tools.exec.sandbox == "bwrap":  # bwrap required: exec refuses, said per call
        return
    text = f"WARNING: exec commands run WITHOUT a sandbox ({line}): {unsandboxed_reach()}"
    if json_logs:  # once: a log record for the journal, or one bold line on a terminal
        log.warning("%s", text)
    else:
        err_console.print(text, markup=False, highlight=False, style="bold red")


def _onboard_logged(config_path: Path | None, log: logging.Logger) -> Config:
    """``ensure_onboarded`` that reports through the (JSON) log instead of plain text."""
    from lucidgate.config import load_config
    from lucidgate.config.onboard import install_templates, write_config

    missing = missing_explicit_config(config_path)
    if missing:
        log.error("config error: %s", missing)
        raise typer.Exit(2)
    path = resolve_config_path(config_path)
    try:
        if write_config(path):
            log.info("%s", first_run_note(config_path, path))
        config = load_config(path)
        install_templates(config.workspace)
    except ConfigError as exc:
        log.error("config error: %s", exc)
        raise typer.Exit(2) from None
    return config
