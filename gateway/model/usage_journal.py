"""Reading the usage journal (``<workspace>/usage/YYYY-MM-DD.jsonl``, one line per model call).

Every report built from the journal (``lucid usage``'s token tables and its cost table,
``/status``) starts from one ``read_journal`` call, so two tables about the same days are
counts of the same lines: read separately, a call recorded between the reads (or a line one
parser accepted and the other did not) made them disagree. A line that is not a call (broken
JSON, no token counts) is skipped here, for every report at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lucidgate.memory.protocols import Usage


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One recorded model call. ``model`` is ``"?"`` for a line that does not name one."""

    day: str  # the file it came from: YYYY-MM-DD (UTC)
    ts: str
    job: str
    session: str | None
    model: str
    role: str | None
    spender: str | None
    usage: Usage


def read_journal(folder: Path, days: int) -> list[JournalEntry]:
    """The calls of the last ``days`` UTC days, newest day first and in call order within a
    day. Blocking: call from a thread or the CLI."""
    entries: list[JournalEntry] = []
    today = datetime.now(UTC).date()
    for offset in range(max(0, days)):
        day = (today - timedelta(days=offset)).strftime("%Y-%m-%d")
        try:
            fh = (folder / f"{day}.jsonl").open("r", encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        with fh:
            for line in fh:
                entry = _entry(day, line)
                if entry is not None:
                    entries.append(entry)
    return entries


def _entry(day: str, line: str) -> JournalEntry | None:
    try:
        e = json.loads(line)
        usage = Usage(int(e["prompt"]), int(e["completion"]), int(e.get("cached", 0)))
    except (ValueError, KeyError, TypeError):  # not JSON, not an object, no token counts
        return None

    def text(key: str) -> str | None:
        value = e.get(key)
        return str(value) if value else None

    return JournalEntry(day=day, ts=str(e.get("ts", "")), job=str(e.get("job", "?")), session=text("session"),
                        model=text("model") or "?", role=text("role"), spender=text("spender"), usage=usage)
