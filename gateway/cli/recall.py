"""``lucid memory search`` and ``lucid memory reindex``: the recall index from a terminal.

Both work with or without a running gateway: the index is one SQLite file in WAL mode,
so this process and the daemon read and write it side by side. When a gateway runs on the
workspace, a search asks it over loopback (its embedder is warm, its index in sync) and
prints its hits exactly as its own; only without one does this process load numpy and the
embedder. The terminal user is the owner, so a search covers everything. Progress goes to
stderr; ``--json`` output to stdout stays machine-readable. The search machinery loads
inside the commands, and hits print without rich: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import json
import sys
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from lucidgate.gateway.cli._common import AgentOption, ConfigOption, console, err_console, load_agent, printable, styled

if TYPE_CHECKING:
    from lucidgate.config import Config
    from lucidgate.memory.search.hits import Hit, SearchSettings
    from lucidgate.memory.search.index import MemoryIndex

__all__ = ["memory_reindex", "memory_search", "status_line"]


class SourceName(str, Enum):
    memory = "memory"
    notes = "notes"
    history = "history"
    session = "session"


def _index(config: Config) -> tuple[MemoryIndex, SearchSettings]:
    """The index and ranking the config describes (not the gateway's service: no asyncio)."""
    from lucidgate.memory.search.configured import open_index

    opened = open_index(config)
    if opened is None:
        err_console.print("memory search is disabled (agents.defaults.memory.search.enabled)")
        raise typer.Exit(1)
    return opened


def _progress() -> Any:
    """A progress bar on a terminal; nothing (and no rich.progress import) when stderr is a
    pipe or a journal, where a transient bar would draw nothing anyway."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    console=err_console.real, transient=True)


def _tracked(progress: Any) -> Any:
    if progress is None:
        return None
    tasks: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(f"indexing {phase}", total=total)
        progress.update(tasks[phase], completed=done, total=total)

    return update


def memory_search(
    query: Annotated[str, typer.Argument(help="What to look for, in any language.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array, best first.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=50, help="How many results.")] = 6,
    source: Annotated[Optional[list[SourceName]], typer.Option(
        "--source", help="Only this source (repeatable): memory, notes, history, session.")] = None,
    config_path: ConfigOption = None,
    agent: AgentOption = None,
) -> None:
    """Search everything remembered: memory files, daily notes, history and transcripts."""

    if not query.strip():
        err_console.print("the search query is empty; say what to look for")
        raise typer.Exit(2)
    config = load_agent(config_path, agent)
    names = [s.value for s in source] if source else None
    hits = _from_gateway(config, query, limit, names)
    if hits is None:
        hits = _in_process(config, query, limit, names)
    _print_hits(hits, as_json)


def _from_gateway(config: Config, query: str, limit: int, sources: list[str] | None) -> list[Hit] | None:
    """The running gateway's hits, or None when none runs on this workspace or it does not
    answer (then this process searches). A refusal that searching here would not change
    (search disabled, a bad query) is printed and ends the command."""
    from lucidgate.gateway.daemon.local_client import LocalRefused, find_running, search_running
    from lucidgate.memory.search.hits import Hit

    endpoint = find_running(config.workspace)
    if endpoint is None:
        return None
    try:
        found = search_running(*endpoint, query, limit=limit, sources=sources)
    except LocalRefused as exc:
        err_console.print(exc.detail, markup=False, highlight=False)
        raise typer.Exit(1 if exc.status == 409 else 2) from None
    if found is None:
        return None
    try:
        return [Hit.from_json(h) for h in found]
    except (KeyError, TypeError, ValueError):
        return None


def _in_process(config: Config, query: str, limit: int, sources: list[str] | None) -> list[Hit]:
    """Sync the index and search it here (loads numpy and the embedder)."""
    from lucidgate.memory.search import Scope, SearchError, search

    index, settings = _index(config)
    try:
        with _progress() as progress:
            index.sync(_tracked(progress))
        return search(index, query, k=limit, scope=Scope.everything(), sources=sources,
                      settings=settings)
    except SearchError as exc:
        err_console.print(str(exc))
        raise typer.Exit(2) from None
    finally:
        index.close()


def _print_hits(hits: list[Hit], as_json: bool) -> None:
    """One block per hit; styled with typer's own colours, so a search loads no rich."""
    if as_json:
        typer.echo(json.dumps([h.to_json() for h in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        typer.echo("No matches.")
        return
    for n, hit in enumerate(hits, 1):
        when = f"  {hit.date}" if hit.date else ""
        whose = "" if hit.trusted else "  " + styled(printable(hit.provenance()), fg="yellow")
        where = styled(f"{n}. {printable(hit.where())}", bold=True)
        typer.echo(f"{where}{when}  {styled(f'score {hit.score:.2f}', dim=True)}{whose}")
        typer.echo(printable(hit.snippet))
        typer.echo()


def memory_reindex(config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Rebuild the search index from the files (a fresh copy, swapped in atomically)."""
    from lucidgate.memory.search.rebuild import rebuild

    index, _ = _index(load_agent(config_path, agent))
    try:
        with _progress() as progress:
            figures = rebuild(index, _tracked(progress))
    finally:
        index.close()
    console.print(f"reindexed: {figures['chunks']:,} chunks from {figures['files']} files; "
                  f"embedder {figures['embedder']}", markup=False, highlight=False)


def status_line(config: Any) -> str:
    """``lucid status``'s index line (no model load, no sync: just the figures)."""
    from lucidgate.memory.search.configured import open_index

    opened = open_index(config)
    if opened is None:
        return "disabled"
    index = opened[0]
    if not (config.workspace / "memory").is_dir():
        return "not built yet (the gateway builds it on start)"
    try:
        s = index.status()
    except Exception as exc:
        return f"unavailable ({exc})"
    finally:
        index.close()
    return (f"{s['chunks']:,} chunks from {s['files']} files ({s['embedded']:,} embedded); "
            f"embedder {s['embedder']}; last sync {s['last_sync'] or 'never'}")
