"""What every ``lucid`` subcommand shares: consoles, the ``--config`` option, loading config.

Heavy modules (litellm, the gateway wiring, the config schema, rich) are imported inside the
functions that need them, so ``lucid --help`` and ``lucid --version`` load typer and little else.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from lucidgate.config.paths import first_run_note, resolve_config_path

if TYPE_CHECKING:
    from rich.console import Console

    from lucidgate.config import Config
    from lucidgate.gateway.stores import WorkspaceParts


class LazyConsole:
    """A rich ``Console`` built on first use (importing rich costs ~40 ms that ``--help`` and
    ``--version`` never need). Attribute access is forwarded; ``.real`` is the Console itself,
    for rich APIs that take one (``Live``, ``Progress``)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def real(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


# soft_wrap: never wrap at 80 columns when the output is not a terminal (one journal line
# per message, not a sentence cut over three).
console = LazyConsole(soft_wrap=True)
err_console = LazyConsole(stderr=True, soft_wrap=True)


def styled(text: str, **style: Any) -> str:
    """``text`` in terminal colours (``typer.style``) for ``typer.echo``, which drops them when
    the output is not a terminal; plain when ``NO_COLOR`` is set, as rich does. For output
    that needs nothing more than bold or a colour: no rich import (~40 ms)."""
    return text if os.environ.get("NO_COLOR") else typer.style(text, **style)


# C0 and C1 control characters but tab and newline: what a terminal would act on.
_CONTROLS = dict.fromkeys(c for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A))


def printable(text: str) -> str:
    """``text`` without control characters: remembered words are partly other people's (and a
    reply may quote them), and an escape sequence in them must not retitle, recolour or clear
    the owner's terminal."""
    return text.translate(_CONTROLS)


ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Config file (default: $LUCIDGATE_CONFIG or ~/.lucidgate/config.json)."),
]


def load_or_exit(config_path: Path | None) -> Config:
    """The config, or the error printed and exit code 2 (a typo must not start anything)."""
    from lucidgate.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as exc:
        err_console.print(f"[red]config error[/red]: {exc}")
        raise typer.Exit(2) from None


AgentOption = Annotated[
    Optional[str],
    typer.Option("--agent", metavar="ID",
                 help="Act on this agent's workspace (an id from agents.list; default: the default agent)."),
]


def agent_or_exit(config: Config, agent_id: str | None) -> Config:
    """The config agent ``agent_id`` runs with (``Config.for_agent``); ``config`` itself when no
    ``--agent`` was given, so every command without it acts as it always did. An unknown id
    exits 2 naming the agents there are: a typo must never act on another agent's memory."""
    if agent_id is None:
        return config
    ids = config.agent_ids()
    if agent_id not in ids:
        err_console.print(f"no agent {agent_id!r} in this config; {describe_agents(config)}",
                          markup=False, highlight=False)
        raise typer.Exit(2)
    return config.for_agent(agent_id)


def describe_agents(config: Config) -> str:
    """"its agents: home (default), work", or how a config without ``agents.list`` reads."""
    if not config.agents.entries:
        return f"it has one agent, {config.default_agent_id!r} (agents.list adds more: see docs/agents.md)"
    default = config.default_agent_id
    return "its agents: " + ", ".join(f"{i} (default)" if i == default else i for i in config.agent_ids())


def agent_stamp(config: Config, agent_id: str | None) -> str:
    """What the agent's messages and session keys carry (``InboundMessage.agent``): "" for the
    default agent (its keys stay ``cli:local``), its id for another (``work:cli:local``)."""
    return "" if agent_id is None or agent_id == config.default_agent_id else agent_id


def load_agent(config_path: Path | None, agent_id: str | None) -> Config:
    """``load_or_exit`` then ``agent_or_exit``: the config of the agent a command acts on."""
    return agent_or_exit(load_or_exit(config_path), agent_id)


def workspace_parts(config_path: Path | None, agent_id: str | None = None) -> WorkspaceParts:
    """The workspace's stores for a one-off command (each built when first used): the default
    agent's, or ``agent_id``'s."""
    from lucidgate.gateway.stores import WorkspaceParts

    return WorkspaceParts(load_agent(config_path, agent_id))


def missing_explicit_config(config_path: Path | None) -> str:
    """Why a ``-c`` path cannot be used ("" when it exists, or when none was given).

    A first run writes a default config only at the default path or ``$LUCIDGATE_CONFIG``: a
    mistyped ``-c`` must not quietly become a new, empty setup that chats with no model."""
    if config_path is None:
        return ""
    path = Path(config_path).expanduser()
    if path.exists():
        return ""
    return (f"config file {path} does not exist; check the path, or create it with "
            f"`lucid onboard -c {path}`")


def ensure_onboarded(config_path: Path | None) -> Config:
    """First run writes a default config and the workspace templates; later runs change nothing."""
    from lucidgate.config.onboard import install_templates, write_config

    missing = missing_explicit_config(config_path)
    if missing:
        err_console.print(f"[red]config error[/red]: {missing}", highlight=False)
        raise typer.Exit(2)
    path = resolve_config_path(config_path)
    if not path.exists():
        write_config(path)
        err_console.print(first_run_note(config_path, path), markup=False, highlight=False)
    config = load_or_exit(path)
    install_templates(config.workspace)
    return config


def preload_litellm() -> None:
    """Import litellm in a background thread while the rest starts (it takes seconds)."""
    def load() -> None:
        from lucidgate.gateway.model.client import import_litellm

        try:
            import_litellm()
        except Exception:  # surfaced properly at the first call
            pass

    threading.Thread(target=load, name="litellm-import", daemon=True).start()


def provider_help(config: Config, config_path: Path | None = None) -> str:
    """How to configure a model, or "" when one is configured."""
    from lucidgate.gateway.model.configured import provider_configured

    ok, why = provider_configured(config)
    if ok:
        return ""
    path = resolve_config_path(config_path)
    return (
        f"No model is configured yet: {why}.\n"
        f"Edit {path} and set, for a hosted model:\n"
        '  "providers": {"openai": {"apiKey": "sk-..."}}\n'
        "or, for a local OpenAI-compatible server (Ollama, llama.cpp, vLLM):\n"
        '  "agents": {"defaults": {"model": "openai/<model-name>"}},\n'
        '  "providers": {"openai": {"apiBase": "http://127.0.0.1:11434/v1"}}\n'
        "or set LUCIDGATE_PROVIDERS__OPENAI__API_KEY in the environment."
    )


def new_table(*columns: str, **options: Any) -> Any:
    """A rich ``Table`` whose text cells and title print exactly as written (rich loads here, on
    the first table printed, not at ``lucid`` start).

    Tables show stored words — chat ids, reminder texts, session keys, commit messages — and
    some of them are strangers': ``[/oops]`` must not be parsed as markup (rich raises on it),
    ``[link=…]`` must not become a link, and an escape sequence must not reach the terminal."""
    table_class = _plain_table_class()
    title = options.get("title")
    if isinstance(title, str):
        options["title"] = plain_text(title)
    return table_class(*columns, **options)


def plain_text(text: str) -> Any:
    """``text`` as a rich ``Text``: never parsed as markup, without control characters."""
    from rich.text import Text

    return Text(printable(text))


@functools.cache
def _plain_table_class() -> type:
    from rich.table import Table

    class PlainCellTable(Table):
        def add_row(self, *cells: Any, **options: Any) -> None:
            super().add_row(*(plain_text(c) if isinstance(c, str) else c for c in cells), **options)

    return PlainCellTable


def escape(text: str) -> str:
    """``text`` with rich markup escaped, for printing words that are not ours."""
    from rich.markup import escape as escape_markup

    return escape_markup(text)
