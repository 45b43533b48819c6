"""``lucid memory forget``, ``lucid memory forgotten`` and ``lucid memory unforget``.

``forget`` is ``/forget`` from a terminal (every place memory holds the text, kept forgotten
by a tombstone), plus ``--purge``: rewrite the memory's git history so no commit holds it.
``forgotten`` lists the tombstones; ``unforget`` removes one, so the text may be learned again
(what was removed stays removed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lucidgate.gateway.cli._common import (AgentOption, ConfigOption, console, err_console, load_agent, new_table,
                                           workspace_parts)

__all__ = ["register"]


def register(memory_app: typer.Typer) -> None:
    memory_app.command("forget")(memory_forget)
    memory_app.command("forgotten")(memory_forgotten)
    memory_app.command("unforget")(memory_unforget)


def memory_forget(
    text: Annotated[str, typer.Argument(help="What to forget (case-insensitive, across line wraps).")],
    purge: Annotated[bool, typer.Option("--purge", help="Also rewrite the git history of memory "
                                        "so no commit holds it (git-filter-repo).")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Go ahead even when the text is short or "
                                      "matches a large share of memory.")] = False,
    keep_text: Annotated[bool, typer.Option("--keep-text", help="Keep the text readable in the "
                                            "tombstone (default: only a hash).")] = False,
    config_path: ConfigOption = None,
    agent: AgentOption = None,
) -> None:
    """Forget TEXT everywhere memory holds it, and keep it forgotten."""
    import asyncio
    import getpass

    from lucidgate.memory.errors import DreamBusy, GitStoreError
    from lucidgate.memory.forget import ForgetNeedsConfirmation, describe, forget_exclusive
    from lucidgate.memory.search.configured import open_index

    config = load_agent(config_path, agent)

    async def run() -> int:
        from lucidgate.gateway.app import build_dream, build_model
        from lucidgate.gateway.stores import WorkspaceParts

        # Dream's lock and the stores, not a gateway: no bus, no channel, no agent loop.
        stores = WorkspaceParts(config)
        dream = build_dream(config, stores, build_model(config, stores))
        await asyncio.to_thread(stores.git.init)
        opened = open_index(config)
        index = opened[0] if opened else None
        try:
            report = await forget_exclusive(
                dream, stores.memory, stores.git, text, index=index, sessions=stores.sessions,
                confirm=yes, keep_text=keep_text, purge=purge,
                by=f"lucid memory forget by {getpass.getuser()}",
                backup_dirs=[Path.cwd(), config.workspace.parent])
        except DreamBusy:
            err_console.print("Dream is updating memory right now; try again in a minute.")
            return 1
        except ForgetNeedsConfirmation as exc:
            err_console.print(f"Not forgotten: {exc}. Run again with --yes to go ahead.", markup=False)
            return 1
        except (GitStoreError, ValueError) as exc:
            err_console.print(str(exc), markup=False)
            return 1
        finally:
            if index is not None:
                index.close()
        console.print(describe(report), markup=False, highlight=False)
        return 0

    raise typer.Exit(asyncio.run(run()))


def memory_forgotten(config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """List what was forgotten (tombstones; hashed unless kept as text)."""
    stones = workspace_parts(config_path, agent).tombstones.items()
    if not stones:
        console.print("Nothing has been forgotten.")
        return
    table = new_table("id", "when", "asked by", "what")
    for t in stones:
        table.add_row(t.id, t.created, t.by, t.shown())
    console.print(table)


def memory_unforget(ident: Annotated[str, typer.Argument(help="The id `lucid memory forgotten` shows.")],
                    config_path: ConfigOption = None, agent: AgentOption = None) -> None:
    """Remove a tombstone: the text may be learned again (nothing removed comes back by itself)."""
    removed = workspace_parts(config_path, agent).tombstones.remove(ident)
    if removed is None:
        err_console.print(f"no single tombstone has the id {ident!r}; see `lucid memory forgotten`",
                          markup=False)
        raise typer.Exit(1)
    console.print(f"un-forgot {removed.id}: it may be remembered again")
