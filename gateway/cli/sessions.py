"""``lucid sessions``: the conversations on disk, newest first.

Reads only the transcripts' first line and their size and mtime (a transcript is an
append-only log: its header is written at creation, the mtime moves with every message),
so it is instant however long the chats are, and works beside a running gateway.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from lucidgate.gateway.cli._common import (AgentOption, ConfigOption, agent_or_exit, agent_stamp, console, load_or_exit,
                                           new_table)


def register(app: typer.Typer) -> None:
    app.command()(sessions)


def sessions(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many to show.")] = 30,
    config_path: ConfigOption = None,
    agent: AgentOption = None,
) -> None:
    """List conversations (channel, chat, last activity, size); `lucid agent -s NAME` resumes a terminal one."""
    from lucidgate.gateway.stores import WorkspaceParts
    from lucidgate.memory.naming import read_header

    root = load_or_exit(config_path)
    folder = WorkspaceParts(agent_or_exit(root, agent)).sessions_dir
    stamp = agent_stamp(root, agent)  # another agent's keys start with its id: work:cli:local
    rows: list[tuple[float, str, Path]] = []
    for path in folder.glob("*.jsonl") if folder.exists() else []:
        header = read_header(path)
        if header is not None:
            rows.append((path.stat().st_mtime, str(header["key"]), path))
    if not rows:
        console.print("no conversations yet (start one with: lucid agent)")
        return
    rows.sort(reverse=True)
    table = new_table("session", "last activity", "size", "resume with", title=f"conversations in {folder}")
    for mtime, key, path in rows[:limit]:
        channel, _, chat = key.removeprefix(f"{stamp}:" if stamp else "").partition(":")
        resume = f"lucid agent{f' --agent {agent}' if agent else ''} -s {chat}" if channel == "cli" else ""
        table.add_row(key, datetime.fromtimestamp(mtime).strftime("%Y-%m-%d %H:%M"),
                      _size(path.stat().st_size), resume)
    console.print(table)
    if len(rows) > limit:
        console.print(f"(and {len(rows) - limit} older; --limit shows more)")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n //= 1024
    return f"{n} GiB"
