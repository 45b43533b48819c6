"""``lucid doctor``: check a setup end to end and say how to fix each problem.

Runs every check in ``gateway.ops.checks`` (blocking ones in threads), and renders one
line per check: ✓ fine, ! works but worth a look, ✗ broken with the fix on the next line.
The exit code is 1 when anything is ✗, so scripts and ``ExecStartPre=`` can use it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lucidgate.config import ConfigError, load_config, resolve_config_path
from lucidgate.config.loader import ENV_PREFIX
from lucidgate.config.schema import Config
from lucidgate.gateway.ops import checks
from lucidgate.gateway.ops.checks import Result, fail, ok
from lucidgate.gateway.ops.email_check import email_checks
from lucidgate.gateway.ops.matrix_check import matrix_checks
from lucidgate.gateway.ops.memory_check import memory_commit_check

MARKS = {"ok": "✓", "warn": "!", "fail": "✗"}


def config_check(config_path: Path | None, environ: Mapping[str, str]) -> tuple[Result, Config | None]:
    path = resolve_config_path(config_path)
    if config_path is not None and not path.exists():  # a mistyped -c: never check the defaults instead
        return fail("config", f"{path} does not exist",
                    f"check the path, or create it with `lucid onboard -c {path}`"), None
    overrides = sorted(k for k in environ if k.upper().startswith(ENV_PREFIX) and k.upper() != "LUCIDGATE_CONFIG")
    source = str(path) if path.exists() else f"{path} (missing: defaults)"
    if overrides:
        source += "; environment: " + ", ".join(overrides)
    try:
        config = load_config(path, environ)
    except ConfigError as exc:
        fix = ("correct the JSON where the ^ points" if "not valid JSON" in str(exc)
               else "fix the key or variable named above")
        return fail("config", str(exc), f"{fix}, then run `lucid doctor{_with_config(config_path)}` again"), None
    return ok("config", source), config


async def run_checks(config_path: Path | None = None, environ: Mapping[str, str] | None = None) -> list[Result]:
    env = os.environ if environ is None else environ
    first, config = config_check(config_path, env)
    results = [first]
    if config is None:
        return results
    path = resolve_config_path(config_path)
    results += await asyncio.to_thread(checks.workspace_checks, config, path, _with_config(config_path))
    results.append(await asyncio.to_thread(checks.git_check))
    results.append(await asyncio.to_thread(memory_commit_check, config))
    model, window = await asyncio.gather(checks.model_check(config),
                                         asyncio.to_thread(checks.context_window_check, config))
    results += [model, window]
    for check in (checks.telegram_check, checks.slack_check, checks.discord_check, checks.dingtalk_check):
        found = await asyncio.to_thread(check, config)
        if found is not None:
            results.append(found)
    results += await asyncio.to_thread(matrix_checks, config)
    results += await email_checks(config)
    token = checks.webhook_token_check(config)
    if token is not None:
        results.append(token)
    results.append(await asyncio.to_thread(checks.port_check, config))
    results.append(await asyncio.to_thread(checks.disk_check, config))
    results += await asyncio.to_thread(checks.stores_check, config)
    results += await checks.mcp_checks(config)
    results.append(checks.sandbox_check(config))
    results.append(checks.owner_token_check(config))
    results.append(checks.clock_check(config))
    return results


def _with_config(config_path: Path | None) -> str:
    """The ``-c`` to repeat in a suggested command ("" for the default config)."""
    return f" -c {config_path}" if config_path is not None else ""


def render(results: list[Result]) -> str:
    width = max(len(r.name) for r in results)
    lines = []
    for r in results:
        lines.append(f"{MARKS[r.state]} {r.name.ljust(width)}  {r.detail}")
        if r.fix:
            lines.append(f"  {' ' * width}  fix: {r.fix}")
    broken = sum(1 for r in results if r.state == "fail")
    lines.append("all good" if not broken else f"{broken} problem(s) found")
    return "\n".join(lines)


def as_json(results: list[Result]) -> dict[str, Any]:
    return {"ok": all(r.ok for r in results),
            "checks": [{"name": r.name, "state": r.state, "ok": r.ok, "detail": r.detail, "fix": r.fix}
                       for r in results]}
