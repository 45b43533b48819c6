"""The ``.gitignore`` lucidgate writes into the workspace: only the memory files are versioned.

Files are always added by name, so the ignore file is for whoever runs git by hand there: a
``git add -A`` still picks up nothing but the memory files. A user's own ``.gitignore`` is
left alone; ours is rewritten when it predates a rule (``ours_but_old``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DAILY_NOTE_IGNORE_RULE", "GITIGNORE", "ours_but_old"]

DAILY_NOTE_IGNORE_RULE = "!/memory/[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].md"
GITIGNORE = """\
# Written by lucidgate: only the long-term memory files are versioned here.
/*
!/SOUL.md
!/USER.md
!/memory/
/memory/*
!/memory/MEMORY.md
!/memory/[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].md
!/skills/
__pycache__/
*.tmp
"""


def ours_but_old(ignore: Path) -> bool:
    """Our own .gitignore from before daily notes were versioned (a user's own is left alone)."""
    try:
        text = ignore.read_text(encoding="utf-8")
    except OSError:
        return False
    return text.startswith("# Written by lucidgate") and DAILY_NOTE_IGNORE_RULE not in text
