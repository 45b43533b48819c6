"""``lucid dream``, ``lucid memory …`` and ``lucid usage``: long-term memory and what it costs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lucidgate.gateway.cli import forget, recall
from lucidgate.gateway.cli._common import (AgentOption, ConfigOption, console, err_console, load_agent, new_table,
                                           printable, workspace_parts)

if TYPE_CHECKING:
    from lucidgate.memory.gitstore import GitStore


ShaArgument = Annotated[str, typer.Argument(metavar="SHA", help="A commit, as `lucid memory log` lists it.")]


def register(app: typer.Typer) -> None:
    memory_app = typer.Typer(help="Inspect, undo and forget what long-term memory holds.", no_args_is_help=True)
    memory_app.command("log")(memory_log)
    memory_app.command("diff")(memory_diff)
    memory_app.command("restore")(memory_restore)
    memory_app.command("show")(memory_show)
    memory_app.command("search")(recall.memory_search)
    memory_app.command("reindex")(recall.memory_reindex)
    forget.register(memory_app)
    app.command()(dream)
    app.command()(usage)
    app.add_typer(memory_app, name="memory")


def _git(config_path: Path | None, agent: str | None) -> GitStore:
    """The workspace's history, created if missing; a broken one exits 1 with git's words."""
    from lucidgate.memory.errors import GitStoreError

    git = workspace_parts(config_path, agent).git
    try:
        git.init()
    except GitStoreError as exc:
        err_console.print(f"memory versioning failed: {exc}", markup=False)
        raise typer.Exit(1) from None
    return git


def dream(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print phase-1 findings; change nothing.")] = False,
    from_cursor: Annotated[Optional[int], typer.Option("--from", help="Redo history after this cursor.")] = None,
    config_path: ConfigOption = None,
    agent: AgentOption = None,
) -> None:
    """Run Dream now: distil recent history into USER.md, MEMORY.md, SOUL.md and skills."""
    import asyncio

    from lucidgate.memory.errors import DreamBusy, GitStoreError

    config = load_agent(config_path, agent)

    async def run() -> int:
        from datetime import datetime
        from zoneinfo import ZoneInfo

        from lucidgate.gateway.app import build_dream, build_model
        from lucidgate.gateway.components import ModelClient
        from lucidgate.gateway.stores import WorkspaceParts

        # The few parts Dream needs, not a gateway: no bus, no channel, no agent loop.
        stores = WorkspaceParts(config)
        model = build_model(config, stores)
        dream = build_dream(config, stores, model)
        try:
            await asyncio.to_thread(stores.git.init)
        except GitStoreError as exc:  # Dream still learns; its commit says whether it worked
            err_console.print(f"memory versioning failed: {exc}", markup=False)
        started = datetime.now(ZoneInfo("UTC"))
        client = ModelClient(model, config.agent.model)
        await client.start()
        try:
            with console.status("dreaming…", spinner="dots"):
                try:
                    report = await dream.run(dry_run=dry_run, from_cursor=from_cursor)
                except DreamBusy:
                    err_console.print("Dream is already running (in the gateway?); try again later.")
                    return 1
        finally:
            await client.stop()
        if not dry_run:  # `lucid jobs` and the console show this run as Dream's last one
            result = report.summary().splitlines()[0] + (f" (error: {report.error})" if report.error else "")
            await asyncio.to_thread(stores.job_state.update, "dream",
                                    last_run=started, last_result=f"{result} (lucid dream)"[:300])
        console.print(report.summary(), markup=False)
        return 0 if report.error is None else 1

    raise typer.Exit(asyncio.run(run()))


def memory_log(n: Annotated[int, typer.Option("-n", help="How many commits.")] = 20,
               config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """List memory changes (Dream, manual edits, restores)."""
    table = new_table("sha", "when", "message", "files")
    from rich.text import Text

    from lucidgate.memory.errors import GitStoreError
    from lucidgate.memory.gitpaths import printable_name

    git = _git(config_path, agent)
    try:
        git.commit_manual_edits()  # hand edits since the last commit are changes too
    except GitStoreError as exc:
        err_console.print(f"hand edits are not committed: {exc}", markup=False)
    for c in git.log(n):
        table.add_row(c.short, str(c.when), Text(printable(printable_name(c.message))),
                      Text(", ".join(printable_name(f) for f in c.files)))
    console.print(table)


def memory_diff(sha: ShaArgument, config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Show what one memory commit changed."""
    from lucidgate.memory.errors import MemoryStoreError

    try:
        console.print(printable(_git(config_path, agent).diff(sha)), markup=False, highlight=False)
    except MemoryStoreError as exc:
        err_console.print(str(exc))
        raise typer.Exit(1) from None


def memory_restore(sha: ShaArgument, config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Bring the memory files back to their state before SHA (as a new commit)."""
    from lucidgate.memory.errors import MemoryStoreError

    try:
        new = _git(config_path, agent).restore(sha)
    except MemoryStoreError as exc:
        err_console.print(str(exc))
        raise typer.Exit(1) from None
    console.print(f"restored to before {sha} (commit {new[:8]})")


def memory_show(config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Print SOUL.md, USER.md, MEMORY.md and how much history awaits Dream."""
    store = workspace_parts(config_path, agent).memory
    for label, path in (("SOUL.md", store.soul_path), ("USER.md", store.user_path),
                        ("memory/MEMORY.md", store.memory_path)):
        text = path.read_text(encoding="utf-8") if path.exists() else "(missing)"
        console.rule(label)
        console.print(printable(text.strip()), markup=False, highlight=False)
    console.rule()
    console.print(f"{store.unprocessed_count()} history entries not yet processed by Dream")


def usage(days: Annotated[int, typer.Option("--days", help="How many days back.")] = 7,
          config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Token usage per day, job and session."""
    from lucidgate.gateway.model.costs import costs_by_day
    from lucidgate.gateway.model.usage import summary_of
    from lucidgate.gateway.model.usage_journal import read_journal

    # One read for every table: counts of the same lines, even while the gateway records more.
    entries = read_journal(workspace_parts(config_path, agent).usage.folder, days)
    summary = summary_of(entries)
    for title, rows in (("day", summary.by_day), ("job", summary.by_job), ("session", summary.by_session)):
        table = new_table(title, "calls", "prompt", "completion", "cached", title=f"by {title}")
        for name in sorted(rows):
            t = rows[name]
            table.add_row(name, str(t.calls), f"{t.prompt:,}", f"{t.completion:,}", f"{t.cached:,}")
        console.print(table)
    table = new_table("day", "calls", "cost (USD)", "per turn", title="cost (litellm's local price map)")
    for day, cost in sorted(costs_by_day(entries).items()):
        per_turn = f"${cost.per_turn:.4f}" if cost.per_turn is not None else "—"
        table.add_row(day, str(cost.calls), cost.describe(), per_turn)
    console.print(table)
