"""``lucid agent``: chat in the terminal, through a running gateway or in this process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Optional

import typer

from config import Config
from gateway.cli._common import ConfigOption, console, ensure_onboarded, err_console, preload_litellm, provider_help


def register(app: typer.Typer) -> None:
    app.command()(agent)


def agent(
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="Answer this one message and exit.")] = None,
    config_path: ConfigOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show debug logs.")] = False,
) -> None:
    """Chat with the assistant in the terminal (history is kept across runs).

    With `lucid gateway` running on the same workspace, this talks to it (one agent per
    workspace, no start-up cost); otherwise it runs the agent in this process.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    config = ensure_onboarded(config_path)
    hint = provider_help(config, config_path)
    if hint:
        err_console.print(hint)
        raise typer.Exit(2)
    endpoint = _running_gateway(config)
    if endpoint is not None:
        raise typer.Exit(asyncio.run(_agent_via_gateway(config, endpoint, message)))
    preload_litellm()
    raise typer.Exit(asyncio.run(_agent_main(config, message)))


Ask = Callable[[str], Awaitable[tuple[bool, str]]]


async def _converse(ask: Ask, message: str | None, banner: str) -> int:
    """One message (exit code 0/1), or a prompt loop until 'exit', Ctrl-D or Ctrl-C."""
    if message is not None:
        ok, text = await ask(message)
        (console if ok else err_console).print(text, markup=False, highlight=False)
        return 0 if ok else 1
    console.print(f"[dim]{banner} — type a message; 'exit' or Ctrl-D to leave.[/dim]")
    while True:
        try:
            line = await asyncio.to_thread(input, "you> ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if line.strip().lower() in ("exit", "quit", ":q"):
            return 0
        if not line.strip():
            continue
        with console.status("thinking…", spinner="dots"):
            ok, text = await ask(line)
        (console if ok else err_console).print(text, markup=False, highlight=False)


async def _agent_main(config: Config, message: str | None) -> int:
    from channels.cli import CliChannel
    from gateway.app import build_gateway
    from gateway.workspace_lock import GatewayLocked, WorkspaceLock

    try:
        lock = WorkspaceLock(config.workspace)
        lock.acquire()
    except GatewayLocked as exc:
        err_console.print(f"{exc}\n(if a gateway is starting up, try again in a few seconds)")
        return 1
    try:
        gw = build_gateway(config, "agent", on_unsolicited=_print_unsolicited)
        cli = gw.channel("cli")
        assert isinstance(cli, CliChannel)
        async with gw:
            return await _converse(cli.ask, message, "lucid")
    finally:
        lock.release()


def _print_unsolicited(text: str) -> None:
    """Reminders and `message` tool output that arrive between prompts."""
    console.print(text, markup=False, highlight=False)


def _running_gateway(config: Config) -> tuple[str, str] | None:
    """The local endpoint of a gateway serving this workspace, if one answers its health check."""
    from gateway.local_api import find_running

    endpoint = find_running(config.workspace)
    if endpoint is None:
        return None
    import httpx

    try:
        alive = httpx.get(f"{endpoint[0]}/healthz", timeout=1.5).status_code == 200
    except httpx.HTTPError:
        alive = False
    return endpoint if alive else None


async def _agent_via_gateway(config: Config, endpoint: tuple[str, str], message: str | None) -> int:
    from gateway.local_api import ask_running

    url, token = endpoint
    timeout = config.agent.llm_timeout_s * (config.agent.llm_retries + 1) + 60

    async def ask(text: str) -> tuple[bool, str]:
        result = await asyncio.to_thread(ask_running, url, token, text, timeout_s=timeout)
        return result if result is not None else (False, "the gateway stopped answering; run lucid agent again")

    return await _converse(ask, message, f"lucid (via the gateway at {url})")
