"""Owner-only paths: the one table of workspace paths no role but the owner may change.

Whatever ``tools.guestTools`` grants, a turn that is not the owner's never writes these (and,
where the row says so, never reads them). The file tools (``read_file``, ``write_file``,
``edit_file``, ``list_dir``, ``grep``) consult this table through ``_paths.resolve`` after
symlinks are resolved, so no spelling, link or case variant gets around it; ``exec`` and
``message`` are owner-only tools that no grant can give another role; with bubblewrap, ``exec``
sees these paths read-only (``sandbox_read_only``). docs/security.md prints
``markdown_table()``, and a test keeps the two identical.

Why these: the prompt files and skills land in the owner's system prompt, ``.git`` and the git
control files (``.gitignore``, ``.gitattributes``, ``.gitmodules``, ``.mailmap`` — in any folder,
since git reads each folder's own) decide what memory commits record and how they are encoded
(a hook runs code), ``gateway.lock`` keeps a second gateway off the workspace, and state,
transcripts and databases are the gateway's own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["OWNER_ONLY", "OwnerPath", "markdown_table", "owner_only_reason", "sandbox_read_only"]

Access = Literal["read", "write", "list"]
DATABASE_SUFFIXES = (".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal", ".db", ".db-wal", ".db-shm")


@dataclass(frozen=True, slots=True)
class OwnerPath:
    """One row: ``pattern`` as printed (``NAME``, ``folder/**``, ``**/NAME`` or ``**/*.sqlite``)."""

    pattern: str
    others_read: bool  # other roles may read it (it is in their prompt anyway, or harmless)
    why: str
    owner: str = "every tool"  # what the owner's turns may do with it

    def matches(self, parts: tuple[str, ...]) -> bool:
        """``parts``: the resolved path relative to the workspace, case-folded."""
        if not parts:
            return False
        if self.pattern.startswith("**/*"):
            return parts[-1].endswith(DATABASE_SUFFIXES)
        if self.pattern.startswith("**/"):  # that name in any folder
            return parts[-1] == self.pattern[3:].casefold()
        if self.pattern.endswith("/**"):
            return parts[0] == self.pattern[:-3].casefold()
        return parts == (self.pattern.casefold(),)


_EXEC_ONLY = "`exec` only (the file tools refuse it to everyone)"
OWNER_ONLY: tuple[OwnerPath, ...] = (
    OwnerPath("SOUL.md", True, "the assistant's persona, in every system prompt"),
    OwnerPath("AGENTS.md", True, "standing instructions, in every system prompt"),
    OwnerPath("TOOLS.md", True, "tool notes, in every system prompt"),
    OwnerPath("HEARTBEAT.md", False, "the owner's scheduled checklist, run with owner tools"),
    OwnerPath("USER.md", False, "who the owner is; private"),
    OwnerPath("memory/**", False, "the owner's memory, notes and history",
              "every tool; history is written only by the memory pipeline"),
    OwnerPath("skills/**", True, "skills are listed in (and loaded into) the system prompt"),
    OwnerPath("**/.gitignore", True, "decides what memory commits record"),
    OwnerPath("**/.gitattributes", True, "decides how memory files are encoded, filtered and diffed"),
    OwnerPath("**/.gitmodules", True, "a git control file (submodules)"),
    OwnerPath("**/.mailmap", True, "a git control file (who wrote the memory history)"),
    OwnerPath(".git/**", False, "the memory version store (hooks and config run code)", _EXEC_ONLY),
    OwnerPath("gateway.lock", False, "keeps a second gateway off this workspace"),
    OwnerPath("state/**", False, "pairing codes, routing, the outbox and reminders", _EXEC_ONLY),
    OwnerPath("sessions/**", False, "transcripts are private to their chats", _EXEC_ONLY),
    OwnerPath("usage/**", False, "the spending ledger", "read with the file tools; `exec`"),
    OwnerPath("**/*.sqlite", False, "the index and queue databases (also *.db, -wal, -shm)", _EXEC_ONLY),
)


def owner_only_reason(parts: tuple[str, ...] | None, access: Access) -> str | None:
    """Why a turn that is not the owner's may not ``access`` ``parts``; None when it may."""
    if parts is None:
        return None
    for row in OWNER_ONLY:
        if row.matches(parts) and (access == "write" or not row.others_read):
            return f"{row.pattern} is owner-only: {row.why}"
    return None


# Rows the exec sandbox binds read-only (the owner's memory files and notes stay writable for
# the owner's commands, as with the file tools; everything the gateway itself runs on does not).
_WRITABLE_IN_SANDBOX = frozenset({"USER.md", "memory/**", "usage/**"})
# Folders whose content is read-only whole already, or never holds owner-only names.
_NOT_WALKED = frozenset({".git", "sessions", "state", "node_modules", "__pycache__"})


def sandbox_read_only(workspace: Path) -> list[Path]:
    """The workspace's existing owner-only paths, for the exec sandbox to bind read-only.

    Top-level names and folders are listed as they are; names that count in any folder
    (``.gitignore``, databases) are found by one walk that skips folders already covered."""
    rows = [row for row in OWNER_ONLY if row.pattern not in _WRITABLE_IN_SANDBOX]
    found = [workspace / row.pattern.removesuffix("/**") for row in rows if not row.pattern.startswith("**/")]
    anywhere = [row for row in rows if row.pattern.startswith("**/")]
    for folder, dirs, files in os.walk(workspace):
        rel = Path(folder).relative_to(workspace).parts
        dirs[:] = [d for d in dirs if d not in _NOT_WALKED and (rel or d.casefold() != "skills")]
        for name in files:
            parts = tuple(p.casefold() for p in (*rel, name))
            if any(row.matches(parts) for row in anywhere):
                found.append(Path(folder) / name)
    return [path for path in found if path.exists()]


def markdown_table() -> str:
    """The table as docs/security.md prints it (role × tool × path)."""
    lines = [
        "| Path | Owner | Other roles: `read_file` `grep` `list_dir` | Other roles: `write_file` `edit_file` "
        "| Other roles: `exec` `message` |",
        "|---|---|---|---|---|",
    ]
    for row in OWNER_ONLY:
        read = "yes" if row.others_read else "no"
        lines.append(f"| `{row.pattern}` | {row.owner} | {read} | no | no (owner-only tools) |")
    return "\n".join(lines)
