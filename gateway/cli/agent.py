"""``lucid agent``: chat in the terminal, through a running gateway or in this process."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lucidgate.gateway.cli._common import (ConfigOption, console, ensure_onboarded, err_console, preload_litellm, printable,
                                 provider_help)

if TYPE_CHECKING:
    from lucidgate.config import Config


def register(app: typer.Typer) -> None:
    app.command()(agent)


def agent(
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="Answer this one message and exit.")] = None,
    session: Annotated[str, typer.Option("--session", "-s", metavar="NAME",
                                         help="Talk in this terminal session (`lucid sessions` lists them).")]
    = "local",
    config_path: ConfigOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show debug logs here too.")] = False,
) -> None:
    """Chat with the assistant in the terminal (history is kept across runs).

    With `lucid gateway` running on the same workspace, this talks to it (one agent per
    workspace, no start-up cost); otherwise it runs the agent in this process.
    """
    from lucidgate.gateway.daemon.local_client import SESSION_NAME_PATTERN

    if not re.match(SESSION_NAME_PATTERN, session):
        err_console.print(f"invalid session name {session!r}: use letters, digits, '.', '_' or '-' (at most 64)")
        raise typer.Exit(2)
    config = ensure_onboarded(config_path)
    _log_to_file(config.workspace / "logs" / "agent.log", verbose)
    hint = provider_help(config, config_path)
    if hint:
        err_console.print(hint)
        raise typer.Exit(2)
    endpoint = _running_gateway(config)
    if endpoint is not None and message is not None:
        raise typer.Exit(_one_shot_via_gateway(config, endpoint, message, session))
    import asyncio

    if endpoint is not None:
        raise typer.Exit(asyncio.run(_agent_via_gateway(config, endpoint, session)))
    preload_litellm()
    raise typer.Exit(asyncio.run(_agent_main(config, message, session)))


def _log_to_file(path: Path, verbose: bool) -> None:
    """Logs go to a file, so a warning never lands in the middle of the conversation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
    if verbose:
        handlers.append(logging.StreamHandler())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=handlers,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _agent_main(config: Config, message: str | None, session: str) -> int:
    from lucidgate.channels.cli import CliChannel
    from lucidgate.gateway.cli._switch import TerminalSessions
    from lucidgate.gateway.cli._terminal import LiveAnswer, converse, one_shot
    from lucidgate.gateway.app import build_gateway
    from lucidgate.gateway.daemon.workspace_lock import GatewayLocked, WorkspaceLock
    from lucidgate.gateway.stores import WorkspaceParts

    try:
        lock = WorkspaceLock(config.workspace)
        lock.acquire()
    except GatewayLocked as exc:
        err_console.print(f"{exc}\n(if a gateway is starting up, try again in a few seconds)")
        return 1
    try:
        view = LiveAnswer()
        gw = build_gateway(config, "agent", on_unsolicited=_print_unsolicited, on_progress=view.progress)
        cli = gw.channel("cli")
        assert isinstance(cli, CliChannel)

        sessions = TerminalSessions(WorkspaceParts(config).sessions_dir, session)

        async def ask(text: str) -> tuple[bool, str]:
            return await cli.ask(text, sessions.current)

        async with gw:
            if message is not None:
                return await one_shot(ask, message)
            return await converse(ask, lambda: ask("/stop"), f"lucid (session {session}; /sessions, /switch NAME)",
                                  _history_file(config), view, local=sessions.handle)
    finally:
        lock.release()


def _history_file(config: Config) -> Path:
    return config.workspace / "state" / "terminal_history"


def _print_unsolicited(text: str) -> None:
    """Reminders and `message` tool output that arrive between prompts."""
    console.print(printable(text), markup=False, highlight=False)


def _running_gateway(config: Config) -> tuple[str, str] | None:
    """The local endpoint of a gateway serving this workspace, if one answers its health check."""
    from lucidgate.gateway.daemon.local_client import find_running, healthy

    endpoint = find_running(config.workspace)
    return endpoint if endpoint is not None and healthy(endpoint[0]) else None


def _gateway_timeout_s(config: Config) -> float:
    """How long a turn may take in the gateway: every retry of the model call, and a margin."""
    return config.agent.llm_timeout_s * (config.agent.llm_retries + 1) + 60


def _ask_gateway(endpoint: tuple[str, str], text: str, session: str, timeout_s: float) -> tuple[bool, str]:
    from lucidgate.gateway.daemon.local_client import ask_running

    url, token = endpoint
    result = ask_running(url, token, text, timeout_s=timeout_s, session=session)
    return result if result is not None else (False, "the gateway stopped answering; run lucid agent again")


def _one_shot_via_gateway(config: Config, endpoint: tuple[str, str], message: str, session: str) -> int:
    """``lucid agent -m`` beside a running gateway: one request, no event loop, no rich (the
    whole command is the CLI's start-up plus the turn, so nothing else is loaded)."""
    ok, text = _ask_gateway(endpoint, message, session, _gateway_timeout_s(config))
    typer.echo(printable(text), err=not ok)
    return 0 if ok else 1


async def _agent_via_gateway(config: Config, endpoint: tuple[str, str], session: str) -> int:
    import asyncio

    from lucidgate.gateway.cli._switch import TerminalSessions
    from lucidgate.gateway.cli._terminal import converse
    from lucidgate.gateway.stores import WorkspaceParts

    url = endpoint[0]
    timeout = _gateway_timeout_s(config)
    sessions = TerminalSessions(WorkspaceParts(config).sessions_dir, session)

    async def ask(text: str) -> tuple[bool, str]:
        return await asyncio.to_thread(_ask_gateway, endpoint, text, sessions.current, timeout)

    return await converse(ask, lambda: ask("/stop"),
                          f"lucid (session {session}, via the gateway at {url}; /sessions, /switch NAME)",
                          _history_file(config), local=sessions.handle)
