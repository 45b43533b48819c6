"""``/sessions`` and ``/switch <name>`` in ``lucid agent``: change the conversation mid-chat.

Which terminal session a line goes to is the terminal's own choice (``-s NAME`` at launch),
so these two are answered here, never sent to the agent: ``/sessions`` lists the terminal
conversations on disk (newest first, the current one marked) and ``/switch`` points the
next lines at another one — an existing name resumes it, a new name starts it. Both work
the same whether the terminal talks to a running gateway or runs the agent itself.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from pathlib import Path

from lucidgate.gateway.daemon.local_client import SESSION_NAME_PATTERN

__all__ = ["TerminalSessions"]

CHANNEL = "cli"
# Shown after the assistant's own /help: these two never reach it, so its list cannot name them.
TERMINAL_HELP = ("In this terminal also: /sessions — list the terminal conversations; "
                 "/switch NAME — continue another one (a new name starts one)")


class TerminalSessions:
    def __init__(self, folder: Path, current: str, *, stamp: str = "") -> None:
        """``folder``: the workspace's transcripts (``WorkspaceParts.sessions.dir``); ``stamp``:
        the agent id its keys start with when it is not the default agent (``work:cli:NAME``)."""
        self.folder = folder
        self.current = current
        self.prefix = f"{stamp}:" if stamp else ""

    async def handle(self, line: str) -> str | None:
        """The answer to a local command, or None when ``line`` is for the agent."""
        command, _, rest = line.strip().partition(" ")
        if command == "/sessions":
            return await asyncio.to_thread(self._listing)
        if command == "/switch":
            return await asyncio.to_thread(self._switch, rest.strip())
        return None

    def _names(self) -> list[tuple[float, str, int]]:
        """(mtime, name, messages) of every terminal conversation on disk, newest first."""
        from lucidgate.memory.naming import read_header

        found = []
        for path in self.folder.glob("*.jsonl") if self.folder.is_dir() else []:
            header = read_header(path)
            key = str(header["key"]) if header else ""
            channel, _, name = key.removeprefix(self.prefix).partition(":") if key.startswith(self.prefix) \
                else ("", "", "")
            if channel == CHANNEL and name:
                with path.open("rb") as fh:
                    messages = sum(1 for line in fh if line.strip()) - 1
                found.append((path.stat().st_mtime, name, max(0, messages)))
        return sorted(found, reverse=True)

    def _listing(self) -> str:
        rows = self._names()
        if self.current not in {name for _, name, _ in rows}:
            rows.insert(0, (0.0, self.current, 0))
        lines = [f"{'*' if name == self.current else ' '} {name}  {count} message(s)"
                 + (f", last {datetime.fromtimestamp(mtime).strftime('%Y-%m-%d %H:%M')}" if mtime else "")
                 for mtime, name, count in rows]
        return "Terminal sessions (* = this one; /switch NAME changes):\n" + "\n".join(lines)

    def _switch(self, name: str) -> str:
        if not name:
            return "Usage: /switch NAME (see /sessions; a new name starts a new conversation)"
        if not re.match(SESSION_NAME_PATTERN, name):
            return f"invalid session name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)"
        if name == self.current:
            return f"Already in session {name}."
        known = {n: count for _, n, count in self._names()}
        self.current = name
        if name in known:
            return f"Switched to session {name} ({known[name]} message(s))."
        return f"Switched to a new session {name}."
