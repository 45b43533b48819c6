"""Paths between lucidgate and git, exactly as the file system spells them.

Git's human output quotes a path that holds anything beyond printable ASCII
(``"skills/\\345\\244\\251..."``) and ends a path at a newline, so a name read from it and
handed back to git names no file. Every place that reads paths from git goes through here:

- output is asked for NUL-separated (``-z``) and split on NUL, never on lines; the safe
  git environment also sets ``core.quotePath=false`` and literal pathspecs, so a name is
  never quoted on the way out nor read as a glob or ``:(magic)`` on the way in;
- GitPython decodes output with ``surrogateescape``, so bytes that are not UTF-8 come back
  as lone surrogates and pass back to git unchanged; ``representable`` tells such a name
  apart, since it cannot be written into a commit message, a log line or a JSON answer.

The functions take GitPython's ``repo.git`` command object and run one git process each.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["add_paths", "as_text", "changed_files", "diff_names", "ls_files", "ls_tree_names", "name_status",
           "printable_name", "representable", "split_z"]


def split_z(output: str) -> list[str]:
    """The paths of ``-z`` output (empty fields dropped)."""
    return [p for p in output.split("\0") if p]


def representable(path: str) -> bool:
    """Whether ``path`` is valid Unicode text (a name made of non-UTF-8 bytes is not)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_text(output: str) -> str:
    """``output`` (git's, or a file listing's) as valid text: bytes that were not UTF-8 written
    as ``\\xNN``, any other lone surrogate as ``\\udXXX``, so it can be printed, stored or sent."""
    if representable(output):
        return output
    try:
        return output.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="backslashreplace")
    except UnicodeEncodeError:
        return output.encode("utf-8", errors="backslashreplace").decode("utf-8")


def printable_name(path: str) -> str:
    """``path`` safe to show anywhere: undecodable bytes as ``\\xNN``, control characters escaped."""
    text = as_text(path)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


_REFUSED = re.compile(r"^error: invalid path '(.*)'$", re.MULTILINE)


def add_paths(git: Any, paths: Sequence[str], *options: str) -> list[str]:
    """``git add <options> -- <paths>``, adding every file git can store; returns the names it
    refuses (a folder spelled like ``.git`` in any case or ``git~1``: one such name must not
    block every other file). Any other failure raises ``GitCommandError``."""
    from git.exc import GitCommandError

    status, _, err = git.add("--ignore-errors", *options, "--", *paths,
                             with_exceptions=False, with_extended_output=True)
    if status == 0:
        return []
    refused = _REFUSED.findall(err)
    if not refused or "fatal:" in err:
        raise GitCommandError(["git", "add", *options, "--", *paths], status, err)
    return refused


def ls_files(git: Any, *pathspecs: str) -> list[str]:
    """The indexed paths under ``pathspecs``."""
    return split_z(git.ls_files("-z", "--", *pathspecs))


def diff_names(git: Any, *args: str, paths: Sequence[str] = ()) -> list[str]:
    """The paths ``git diff <args>`` reports as changed (limited to ``paths`` when given)."""
    tail = ["--", *paths] if paths else []
    return split_z(git.diff("--no-ext-diff", "--no-renames", "--name-only", "-z", *args, *tail))


def ls_tree_names(git: Any, rev: str, paths: Sequence[str]) -> list[str]:
    """The files of ``paths`` that exist in ``rev``."""
    return split_z(git.ls_tree("-r", "--name-only", "-z", rev, "--", *paths))


def name_status(git: Any, sha: str) -> list[tuple[str, str]]:
    """``(status letter, path)`` of each file commit ``sha`` changed, in the order ``git show``
    prints their patches (A added, D deleted, M modified, T type changed)."""
    fields = split_z(git.diff_tree("-r", "--root", "--no-renames", "--no-commit-id", "--name-status", "-z", sha))
    return list(zip(fields[0::2], fields[1::2]))


def changed_files(git: Any, shas: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The files each commit changed against its first parent (the root commit: all its files).

    One ``diff-tree --stdin`` for all of them: it prints each commit's full id, then its
    paths, each NUL-terminated (nothing at all for a commit that changed nothing); a field
    equal to a commit asked about starts that commit's list."""
    out: dict[str, list[str]] = {sha: [] for sha in shas}
    if not out:
        return {}
    with tempfile.TemporaryFile() as ids:  # stdin must be a real file for the child
        ids.write("".join(f"{sha}\n" for sha in out).encode("ascii"))
        ids.seek(0)
        raw = git.diff_tree("--stdin", "-r", "--root", "--no-renames", "--name-only", "-z", istream=ids)
    current: list[str] | None = None
    for field in split_z(raw):
        if field in out:
            current = out[field]
        elif current is not None:
            current.append(field)
    return {sha: tuple(files) for sha, files in out.items()}
