"""``lucid doctor``: check a setup end to end and say how to fix each problem.

Runs every check in ``gateway.ops.checks`` (blocking ones in threads), and renders one
line per check: ✓ fine, ! works but worth a look, ✗ broken with the fix on the next line.
The exit code is 1 when anything is ✗, so scripts and ``ExecStartPre=`` can use it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
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
    """Every check, in the order printed. The checks of a workspace (its folder, memory
    commits, disk, stores, recall index, clock) and of a model run once per agent, each
    line labelled ``name (agent)`` when there are several; the rest once."""
    env = os.environ if environ is None else environ
    first, config = config_check(config_path, env)
    results = [first]
    if config is None:
        return results
    path = resolve_config_path(config_path)
    agents = Agents(config)
    if agents.several:
        results += await agents.each(checks.workspace_check, _with_config(config_path))
        if (secrets := checks.secrets_check(config, path)) is not None:
            results.append(secrets)
    else:
        results += await asyncio.to_thread(checks.workspace_checks, config, path, _with_config(config_path))
    results.append(await asyncio.to_thread(checks.git_check))
    results += await agents.each(memory_commit_check)
    results += await agents.per_model()
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
    results += await agents.each(checks.disk_check)
    results += await agents.each(checks.stores_check, tell_default=True)
    results += await checks.mcp_checks(config)
    results.append(checks.sandbox_check(config))
    results.append(checks.owner_token_check(config))
    results += await agents.each(checks.clock_check)
    return results


class Agents:
    """The config's agents, each with its own config (``Config.for_agent``), for the checks
    that are per workspace or per model."""

    def __init__(self, config: Config) -> None:
        ids = config.agent_ids()
        self.several = len(ids) > 1
        self.configs = {agent_id: config.for_agent(agent_id) for agent_id in ids}

    async def each(self, check: Callable[..., Result | list[Result]], *args: Any,
                   tell_default: bool = False) -> list[Result]:
        """``check`` on every agent's config in a thread, its lines labelled with the agent;
        ``tell_default``: the check's last argument says whether this is the default agent
        (whose workspace holds the daemon's own stores)."""
        found: list[Result] = []
        for n, (agent_id, config) in enumerate(self.configs.items()):
            got = await asyncio.to_thread(check, config, *args, *((n == 0,) if tell_default else ()))
            found += [self._label(r, agent_id) for r in (got if isinstance(got, list) else [got])]
        return found

    async def per_model(self) -> list[Result]:
        """The model and its context window, checked once per distinct model (one real call
        each), labelled with the agents that use it."""
        users: dict[tuple[str, int | None], list[str]] = {}
        for agent_id, config in self.configs.items():
            window = config.agent.context_window_tokens if "context_window_tokens" in config.agent.model_fields_set \
                else None
            users.setdefault((config.agent.model, window), []).append(agent_id)
        found: list[Result] = []
        for ids in users.values():
            config = self.configs[ids[0]]
            answered, known = await asyncio.gather(checks.model_check(config),
                                                   asyncio.to_thread(checks.context_window_check, config))
            found += [self._label(answered, ", ".join(ids)), self._label(known, ", ".join(ids))]
        return found

    def _label(self, result: Result, agent: str) -> Result:
        return replace(result, name=f"{result.name} ({agent})") if self.several else result


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
