"""The ``lucid`` command line: a package of subcommand modules, registered explicitly.

Each module owns one topic and exposes ``register(app)``; ``build_app`` calls them in
the order ``lucid --help`` lists them. Nothing registers itself at import time, and
commands only parse flags, load config and delegate (heavy imports happen inside them).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from lucidgate.gateway.cli import (agent, gateway, jobs, memory, migrate, models, onboard, ops, pairing,
                                   sessions, settings, skills, status, webconsole)


def build_app() -> typer.Typer:
    from lucidgate.gateway.cli._suggest import LucidGroup

    app = typer.Typer(
        name="lucid",
        cls=LucidGroup,  # "No such option" suggests only near-misses
        help="lucidgate — a self-hosted personal AI assistant that remembers.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Plain help: flags without type noise, paragraphs wrapped to the terminal.
        rich_markup_mode=None,
        # Click caps help at 80 columns and cuts each command's description to fit; a wide
        # terminal shows the whole first sentence (subcommand groups inherit the width).
        context_settings={"max_content_width": 200},
    )
    app.callback()(_root)
    onboard.register(app)
    settings.register(app)
    agent.register(app)
    sessions.register(app)
    status.register(app)
    memory.register(app)
    gateway.register(app)
    jobs.register(app)
    pairing.register(app)
    ops.register(app)
    webconsole.register(app)
    skills.register(app)
    models.register(app)
    migrate.register(app)
    return app


def narrowed(app: typer.Typer, name: str) -> typer.Typer:
    """``app``, changed in place to hold only the top-level command or group called ``name``
    when there is exactly one (``build_app`` makes a fresh app for each run).

    typer builds every command's parameters before it runs one (~35 ms for lucid's ~40);
    ``lucid memory search`` needs only the ``memory`` group. An unknown name, an option
    (``--help``, ``--version``) or nothing keeps the whole app, so help and "No such
    command" list everything, as before."""
    from typer.main import get_command_name

    commands = [c for c in app.registered_commands
                if (c.name or (c.callback and get_command_name(c.callback.__name__))) == name]
    groups = [g for g in app.registered_groups
              if (g.name or (g.typer_instance and g.typer_instance.info.name)) == name]
    if len(commands) + len(groups) != 1:
        return app
    app.registered_commands, app.registered_groups = commands, groups
    return app


def _version(value: bool) -> None:
    if value:
        from lucidgate.gateway import __version__

        typer.echo(f"lucidgate {__version__}")
        raise typer.Exit(0)


def _root(
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False,
) -> None:
    """lucidgate — a self-hosted personal AI assistant that remembers."""


def main() -> None:
    """Console-script entry point."""
    from lucidgate.gateway._offline import set_offline_environment

    set_offline_environment()
    # numpy's OpenBLAS starts a thread per core at import and lets them spin: on a busy
    # 2-core host that alone took ~0.4 s of a `lucid memory search`. The matrix work here
    # (ranking a few thousand vectors) is too small to gain from threads. Set before any
    # import of numpy; an operator's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # pydantic looks for plugins by reading every installed package's entry points at the
    # first validation (~20 ms of each command that reads the config); lucid uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # Transcripts, memory, journals and state hold private conversations: whatever this
    # process creates is readable by its own user only.
    os.umask(0o077)
    try:
        narrowed(build_app(), sys.argv[1] if len(sys.argv) > 1 else "")(prog_name="lucid")
    except KeyboardInterrupt:
        _fast_exit(130)
    except OSError as exc:  # a read-only workspace, permission denied, a full disk: one line
        from lucidgate.gateway.daemon.health import describe_os_error

        print(f"error: {describe_os_error(exc)[1]}", file=sys.stderr)
        _fast_exit(1)
    except SystemExit as exc:
        _fast_exit(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
    _fast_exit(0)


def _fast_exit(code: int) -> None:
    """Exit without the interpreter's slow teardown of litellm's import graph (~1 s).

    Every command has finished its work and closed its files by now; flush what is
    buffered (stdio, log handlers) and leave.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
