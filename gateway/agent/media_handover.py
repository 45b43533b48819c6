"""Attachments that arrived for another agent move into its workspace (issue 41).

Channels are shared: they save a message's attachments under the daemon's workspace, the
default agent's (``media/<channel>/<chat>/…``), before the router has said whose message it
is. An agent that is not the default one would then cite files it cannot read, and the
default agent's workspace would hold another agent's files. So when such an agent takes a
message, each attachment is moved to the same relative path in its own workspace: the
default agent never keeps it, and the message's paths stay right. Moving twice is harmless
(a replayed message finds its files already moved).

Blocking file work: call ``move_media`` through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["move_media"]


def move_media(source: Path, target: Path, paths: Iterable[str]) -> int:
    """Move each ``media/…`` path from workspace ``source`` to workspace ``target``; returns
    how many moved. Paths outside ``media/`` or resolving out of ``source`` are left alone."""
    root = source.resolve()
    moved = 0
    for rel in paths:
        parts = Path(rel).parts
        if not parts or parts[0] != "media" or ".." in parts or Path(rel).is_absolute():
            continue
        src = (root / rel)
        if not src.is_file() or src.is_symlink() or not src.resolve().is_relative_to(root):
            continue
        dst = target / rel
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(src, dst)
            moved += 1
        except OSError as exc:
            logger.warning("could not move the attachment %s to %s: %s", rel, target, exc)
    return moved
