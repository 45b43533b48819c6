"""``lucid agent``: chat in the terminal, through a running gateway or in this process."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lucidgate.gateway.cli._common import (AgentOption, ConfigOption, agent_or_exit, agent_stamp, console,
                                           ensure_onboarded, err_console, preload_litellm, printable, provider_help)

if TYPE_CHECKING:
    from lucidgate.config import Config
    from lucidgate.gateway.cli._switch import TerminalSessions


def register(app: typer.Typer) -> None:
    app.command()(agent)


def agent(
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="Answer this one message and exit.")] = None,
    session: Annotated[str, typer.Option("--session", "-s", metavar="NAME",
                                         help="Talk in this terminal session (`lucid sessions` lists them).")]
    = "local",
    config_path: ConfigOption = None,
    agent_id: AgentOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show debug logs here too.")] = False,
) -> None:
    """Chat with the assistant in the terminal (history is kept across runs).

    With `lucid gateway` running on the same workspace, this talks to it (one agent per
    workspace, no start-up cost); otherwise it runs the agent in this process. With
    --agent ID it talks to that agent (through the gateway, or that agent alone here).
    """
    from lucidgate.gateway.daemon.local_client import SESSION_NAME_PATTERN

    if not re.match(SESSION_NAME_PATTERN, session):
        err_console.print(f"invalid session name {session!r}: use letters, digits, '.', '_' or '-' (at most 64)")
        raise typer.Exit(2)
    root = ensure_onboarded(config_path)
    config = agent_or_exit(root, agent_id)
    if agent_id is not None:
        from lucidgate.config.onboard import install_templates

        install_templates(config.workspace)  # a new agent's workspace, as the first run makes the default's
    _log_to_file(config.workspace / "logs" / "agent.log", verbose)
    hint = provider_help(config, config_path)
    if hint:
        err_console.print(hint)
        raise typer.Exit(2)
    # The daemon publishes where to reach it in the default agent's workspace, whichever agent is asked for.
    endpoint = _running_gateway(root)
    target = Terminal(config, session, agent_id, agent_stamp(root, agent_id))
    if endpoint is not None and message is not None:
        raise typer.Exit(_one_shot_via_gateway(target, endpoint, message))
    import asyncio

    if endpoint is not None:
        raise typer.Exit(asyncio.run(_agent_via_gateway(target, endpoint)))
    preload_litellm()
    raise typer.Exit(asyncio.run(_agent_main(root, target, message)))


class Terminal:
    """Whom this terminal talks to: the agent's config, the session, and (with ``--agent``) the
    agent's id and the stamp its session keys carry."""

    def __init__(self, config: Config, session: str, agent_id: str | None, stamp: str) -> None:
        self.config, self.session, self.agent_id, self.stamp = config, session, agent_id, stamp

    def sessions(self) -> TerminalSessions:
        from lucidgate.gateway.cli._switch import TerminalSessions
        from lucidgate.gateway.stores import WorkspaceParts

        return TerminalSessions(WorkspaceParts(self.config).sessions_dir, self.session, stamp=self.stamp)

    def banner(self, where: str = "") -> str:
        agent = f"agent {self.agent_id}, " if self.agent_id else ""
        return f"lucid ({agent}session {self.session}{where}; /sessions, /switch NAME)"


def _log_to_file(path: Path, verbose: bool) -> None:
    """Logs go to a file, so a warning never lands in the middle of the conversation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
    if verbose:
        handlers.append(logging.StreamHandler())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=handlers,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _agent_main(root: Config, target: Terminal, message: str | None) -> int:
    """The agent in this process: the default one as always, or with ``--agent`` that agent
    alone, over its own workspace (its lock, its terminal inbox, its sessions)."""
    from lucidgate.channels.cli import CliChannel
    from lucidgate.gateway.cli._terminal import LiveAnswer, converse, one_shot
    from lucidgate.gateway.app import build_gateway
    from lucidgate.gateway.daemon.workspace_lock import GatewayLocked, WorkspaceLock

    config = target.config
    try:
        lock = WorkspaceLock(config.workspace)
        lock.acquire()
    except GatewayLocked as exc:
        err_console.print(f"{exc}\n(if a gateway is starting up, try again in a few seconds)")
        return 1
    try:
        view = LiveAnswer()
        gw = build_gateway(root, "agent", on_unsolicited=_print_unsolicited, on_progress=view.progress,
                           only_agent=target.agent_id)
        cli = gw.channel("cli")
        assert isinstance(cli, CliChannel)

        sessions = target.sessions()

        async def ask(text: str) -> tuple[bool, str]:
            return await cli.ask(text, sessions.current)

        async with gw:
            if message is not None:
                return await one_shot(ask, message)
            return await converse(ask, lambda: ask("/stop"), target.banner(),
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


def _ask_gateway(endpoint: tuple[str, str], text: str, session: str, timeout_s: float,
                 agent: str | None = None) -> tuple[bool, str]:
    from lucidgate.gateway.daemon.local_client import ask_running

    url, token = endpoint
    result = ask_running(url, token, text, timeout_s=timeout_s, session=session, agent=agent)
    return result if result is not None else (False, "the gateway stopped answering; run lucid agent again")


def _one_shot_via_gateway(target: Terminal, endpoint: tuple[str, str], message: str) -> int:
    """``lucid agent -m`` beside a running gateway: one request, no event loop, no rich (the
    whole command is the CLI's start-up plus the turn, so nothing else is loaded)."""
    ok, text = _ask_gateway(endpoint, message, target.session, _gateway_timeout_s(target.config), target.agent_id)
    typer.echo(printable(text), err=not ok)
    return 0 if ok else 1


async def _agent_via_gateway(target: Terminal, endpoint: tuple[str, str]) -> int:
    import asyncio

    from lucidgate.gateway.cli._terminal import converse

    url = endpoint[0]
    timeout = _gateway_timeout_s(target.config)
    sessions = target.sessions()

    async def ask(text: str) -> tuple[bool, str]:
        return await asyncio.to_thread(_ask_gateway, endpoint, text, sessions.current, timeout, target.agent_id)

    return await converse(ask, lambda: ask("/stop"), target.banner(f", via the gateway at {url}"),
                          _history_file(target.config), local=sessions.handle)
