"""``lucid dream``, ``lucid memory …``, ``lucid usage`` and ``lucid pairing approve``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from gateway.cli import ConfigOption, _load, app, console, err_console, memory_app, pairing_app


def _git(config_path: Path | None):
    from memory.gitstore import GitStore

    config = _load(config_path)
    git = GitStore(config.workspace)
    git.init()
    return git


@app.command()
def dream(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print phase-1 findings; change nothing.")] = False,
    from_cursor: Annotated[Optional[int], typer.Option("--from", help="Redo history after this cursor.")] = None,
    config_path: ConfigOption = None,
) -> None:
    """Run Dream now: distil recent history into USER.md, MEMORY.md, SOUL.md and skills."""
    from memory.errors import DreamBusy

    config = _load(config_path)

    async def run() -> int:
        from gateway.app import build_gateway

        gw = build_gateway(config, inbox_name="inbox.cli.jsonl")
        await asyncio.to_thread(gw.git.init)
        with console.status("dreaming…", spinner="dots"):
            try:
                report = await gw.dream.run(dry_run=dry_run, from_cursor=from_cursor)
            except DreamBusy:
                err_console.print("Dream is already running (in the gateway?); try again later.")
                return 1
        console.print(report.summary(), markup=False)
        return 0 if report.error is None else 1

    raise typer.Exit(asyncio.run(run()))


@memory_app.command("log")
def memory_log(n: Annotated[int, typer.Option("-n", help="How many commits.")] = 20,
               config_path: ConfigOption = None) -> None:
    """List memory changes (Dream, manual edits, restores)."""
    table = Table("sha", "when", "message", "files")
    for c in _git(config_path).log(n):
        table.add_row(c.short, str(c.when), c.message, ", ".join(c.files))
    console.print(table)


@memory_app.command("diff")
def memory_diff(sha: str, config_path: ConfigOption = None) -> None:
    """Show what one memory commit changed."""
    from memory.errors import MemoryStoreError

    try:
        console.print(_git(config_path).diff(sha), markup=False, highlight=False)
    except MemoryStoreError as exc:
        err_console.print(str(exc))
        raise typer.Exit(1) from None


@memory_app.command("restore")
def memory_restore(sha: str, config_path: ConfigOption = None) -> None:
    """Bring the memory files back to their state before SHA (as a new commit)."""
    from memory.errors import MemoryStoreError

    try:
        new = _git(config_path).restore(sha)
    except MemoryStoreError as exc:
        err_console.print(str(exc))
        raise typer.Exit(1) from None
    console.print(f"restored to before {sha} (commit {new[:8]})")


@memory_app.command("show")
def memory_show(config_path: ConfigOption = None) -> None:
    """Print SOUL.md, USER.md, MEMORY.md and how much history awaits Dream."""
    from memory.store import MemoryStore

    config = _load(config_path)
    store = MemoryStore(config.workspace)
    for label, path in (("SOUL.md", store.soul_path), ("USER.md", store.user_path),
                        ("memory/MEMORY.md", store.memory_path)):
        text = path.read_text(encoding="utf-8") if path.exists() else "(missing)"
        console.rule(label)
        console.print(text.strip(), markup=False, highlight=False)
    console.rule()
    console.print(f"{store.unprocessed_count()} history entries not yet processed by Dream")


@app.command()
def usage(days: Annotated[int, typer.Option("--days", help="How many days back.")] = 7,
          config_path: ConfigOption = None) -> None:
    """Token usage per day, job and session."""
    from gateway.usage import UsageLedger

    config = _load(config_path)
    summary = UsageLedger(config.workspace / "usage").summarise(days)
    for title, rows in (("day", summary.by_day), ("job", summary.by_job), ("session", summary.by_session)):
        table = Table(title, "calls", "prompt", "completion", "cached", title=f"by {title}")
        for name in sorted(rows):
            t = rows[name]
            table.add_row(name, str(t.calls), f"{t.prompt:,}", f"{t.completion:,}", f"{t.cached:,}")
        console.print(table)


@pairing_app.command("approve")
def pairing_approve(code: str, config_path: ConfigOption = None) -> None:
    """Allow the person who was given CODE to talk to the assistant."""
    from channels.pairing import PairingStore

    config = _load(config_path)
    result = PairingStore(config.workspace / "state" / "pairing.json").approve(code)
    if result is None:
        err_console.print("unknown, used or expired code (codes last one hour)")
        raise typer.Exit(1)
    channel, sender = result
    console.print(f"approved {channel} user {sender}")
