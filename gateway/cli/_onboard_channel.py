"""``lucid onboard --channel NAME [--set key=value ...]``: one channel, from nothing to ready.

Asks for the settings in ``config.onboard_channel.PROMPTS`` (or takes them from ``--set``, for
scripts without a terminal), writes them into the config file with the channel switched on,
then loads the config again and runs the channel's own preflight — the check the gateway runs
before connecting — so the person learns now, not at the next restart, what is still missing.
A secret is asked without echo and never printed back; an empty answer keeps what is there.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from lucidgate.gateway.cli._common import console, err_console, load_or_exit

if TYPE_CHECKING:
    from pydantic import BaseModel

# What `lucid doctor` then proves that a preflight cannot: the platform accepts the credentials.
_DOCTOR_PROVES = {
    "email": "logs in to IMAP and SMTP",
    "dingtalk": "asks DingTalk for an access token with the Client ID and Secret",
    "telegram": "asks Telegram who the bot is (getMe)",
    "slack": "asks Slack who the bot is (auth.test)",
    "discord": "asks Discord who the bot is",
    "matrix": "asks the homeserver who the bot is (whoami)",
}


def onboard_channel(path: Path, config_path: Path | None, channel: str | None, assignments: list[str]) -> None:
    """The command's body: exit 2 on a usage or config error, 1 when the channel is not ready yet."""
    from lucidgate.config.onboard import workspace_beside, write_config
    from lucidgate.config.onboard_channel import PROMPTS

    if channel is None:
        _refuse(f"--set needs --channel NAME (one of: {', '.join(PROMPTS)})")
    name = channel.strip().lower()
    if name not in PROMPTS:
        _refuse(f"unknown channel {channel!r}; lucid onboard --channel takes one of: {', '.join(PROMPTS)}")
    given = _parse_assignments(name, assignments)  # before anything is written
    if not path.exists() and write_config(path, workspace_beside(path) if config_path is not None else None):
        console.print(f"wrote {path}", markup=False, highlight=False)
    section = getattr(load_or_exit(path).channels, name)
    values = given if assignments else _ask(name, section)
    _write(path, name, values)
    _report(name, getattr(load_or_exit(path).channels, name))


def _refuse(message: str) -> NoReturn:
    err_console.print(f"[red]error[/red]: {message}", highlight=False)
    raise typer.Exit(2)


def _parse_assignments(channel: str, assignments: list[str]) -> dict[str, Any]:
    from lucidgate.config.onboard_channel import parse_answer

    values: dict[str, Any] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            _refuse(f"--set {item.split('=')[0]!r}: expected KEY=VALUE (a key of channels.{channel})")
        try:
            values[key.strip()] = parse_answer(channel, key.strip(), text)
        except ValueError as exc:
            _refuse(str(exc))
    return values


def _ask(channel: str, section: BaseModel) -> dict[str, Any]:
    """One prompt per setting of the channel's table; only answers that change something count."""
    from lucidgate.config.onboard_channel import PROMPTS, current_text, is_secret, parse_answer

    console.print(f"Setting up channels.{channel} (Enter keeps the value in brackets).", markup=False,
                  highlight=False)
    values: dict[str, Any] = {}
    for prompt in PROMPTS[channel]:
        current = current_text(section, channel, prompt.key)
        secret = is_secret(channel, prompt.key)
        label = prompt.key + (f" ({prompt.hint})" if prompt.hint else "")
        if secret:
            label += " [hidden; Enter keeps the current one]" if current else " [hidden]"
        while True:
            answer = typer.prompt(label, default="" if secret else current, show_default=not secret and bool(current),
                                  hide_input=secret)
            if answer.strip() == current.strip() or not answer.strip():
                break
            try:
                values[prompt.key] = parse_answer(channel, prompt.key, answer)
                break
            except ValueError as exc:
                err_console.print(f"{exc}; try again", markup=False, highlight=False)
    return values


def _write(path: Path, channel: str, values: dict[str, Any]) -> None:
    from lucidgate.config.onboard_channel import write_channel

    try:
        write_channel(path, channel, values)
    except ValueError as exc:
        err_console.print(f"[red]config error[/red]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    keys = ", ".join([*values, "enabled"])
    console.print(f"channels.{channel} in {path}: set {keys}", markup=False, highlight=False)


def _report(channel: str, section: BaseModel) -> None:
    """The channel's preflight on the config as it now loads, and what to do next."""
    preflight = importlib.import_module(f"lucidgate.channels.{channel}").preflight
    reason = preflight(section)
    if reason is None:
        console.print("ready: restart the gateway", markup=False, highlight=False)
    else:
        console.print(f"not ready: {reason}", markup=False, highlight=False)
    proves = _DOCTOR_PROVES.get(channel, "checks the channel")
    console.print(f"next: `lucid doctor` {proves}; see docs/channels/{channel}.md", markup=False, highlight=False)
    if reason is not None:
        raise typer.Exit(1)
