"""Files out: what a channel sends when an ``OutboundText`` names workspace files.

The ``message`` tool checks each path when the model names it (confined to the workspace,
no internal state, at most ``MAX_FILE_BYTES``). The send happens later, maybe after a
restart, so a channel checks again here: the path must still resolve inside the workspace
(a symlink swapped in meanwhile does not lead out) and still be a small regular file. A file
that is gone by then cannot get better with retries, so it becomes a line in the text instead
of an error that would hold the chat's lane until the deadline.

Channels that cannot carry files at all use ``unsent_note`` so the person reads which files
were meant for them rather than having them dropped silently.

With several agents (issue 41) a reply's paths are named in the workspace of the agent that
sent it (``OutboundText.agent``): ``FileRoots`` maps each agent to its workspace, and a path is
checked in that one only, so an agent's reply never carries another agent's file.

These helpers touch the file system: call ``ready`` through ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MAX_FILE_BYTES", "MAX_FILES", "FileRoots", "OutFile", "check", "ready", "unsent_note",
           "with_problems"]

# One cap every channel can take (Discord's default upload limit, Telegram's photo limit).
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_FILES = 10

# Shown inline as a photo where the platform distinguishes (Telegram); the rest as documents.
_IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp"})


@dataclass(frozen=True, slots=True)
class OutFile:
    """One file ready to upload: ``rel`` as the model named it, ``path`` resolved."""

    rel: str
    path: Path
    size: int

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_image(self) -> bool:
        return self.path.suffix.casefold() in _IMAGE_SUFFIXES


@dataclass(frozen=True, slots=True)
class FileRoots:
    """Where a reply's file paths resolve: ``default``, the channel's workspace (the default
    agent's), for the default agent's replies; ``agents[id]`` for agent ``id``'s."""

    default: Path
    agents: Mapping[str, Path] = field(default_factory=dict)

    def of(self, agent: str) -> Path | None:
        """Agent ``agent``'s workspace ("" is the default agent); None for an agent not running here."""
        return self.default if not agent else self.agents.get(agent)


def check(workspace: Path, rel: str) -> OutFile | str:
    """``rel`` resolved and checked, or why it cannot be sent (a sentence for the person)."""
    root = workspace.resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        return f"{rel} is outside the workspace"
    try:
        info = path.stat()
    except OSError:
        return f"{rel} no longer exists"
    if not path.is_file():
        return f"{rel} is not a regular file"
    if info.st_size > MAX_FILE_BYTES:
        return f"{rel} is {info.st_size / 1e6:.1f} MB, over the {MAX_FILE_BYTES // 2**20} MB limit"
    return OutFile(rel, path, info.st_size)


def ready(where: Path | FileRoots, files: Sequence[str], agent: str = "") -> tuple[list[OutFile], list[str]]:
    """The files that can go out, and one problem line per file that cannot. ``where`` is the
    workspace, or each agent's (``FileRoots``): the files of ``agent``'s reply are its own."""
    workspace = where.of(agent) if isinstance(where, FileRoots) else (None if agent else where)
    if workspace is None:
        return [], [f"{rel}: the agent {agent!r} that sent it does not run here" for rel in files]
    sendable: list[OutFile] = []
    problems: list[str] = []
    for rel in files:
        found = check(workspace, rel)
        if isinstance(found, str):
            problems.append(found)
        else:
            sendable.append(found)
    return sendable, problems


def with_problems(text: str, problems: Sequence[str]) -> str:
    """``text`` followed by a line naming each file that was not sent and why."""
    if not problems:
        return text
    lines = "\n".join(f"(file not sent: {p})" for p in problems)
    return f"{text}\n\n{lines}" if text.strip() else lines


def unsent_note(text: str, files: Sequence[str], channel: str) -> str:
    """For a channel that cannot carry files: the text, then which files were not sent."""
    return with_problems(text, [f"{rel}: the {channel} channel cannot carry files; it stays in the workspace"
                               for rel in files])
