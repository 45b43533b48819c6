"""Purging a forgotten text from the memory's git history (``lucid memory forget --purge``).

A forget changes the files in a new commit, so older commits still hold the text and
``lucid memory log``/``diff`` can show it. A purge rewrites every commit — contents and
messages — with the text replaced by ``[forgotten]``, matched case-insensitively and
across line wraps. The rewrite is git-filter-repo's (the tool git itself recommends for
this), run as a subprocess with ``gitsafe``'s environment (hooks and fsmonitor off) under
the memory git lock; it expires the reflog and prunes the old objects itself. Archives
made before (``lucid backup``) are not touched: the report names the ones it can see.
Blocking; call it in a worker thread.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lucidgate.memory import _git_stamp
from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.gitsafe import run_git, safe_env
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.tombstones import REDACTED, normalise

logger = logging.getLogger(__name__)

__all__ = ["PurgeReport", "purge_history"]

BACKUP_GLOB = "lucidgate-backup-*.tar.gz"


@dataclass(slots=True)
class PurgeReport:
    commits_before: int
    commits_holding: int
    backups: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"History of changes rewritten: {self.commits_holding} of {self.commits_before} "
                 "commit(s) held the text; no commit holds it now."]
        if self.backups:
            lines.append("These backups were made before and still hold it; delete them or keep them safe:")
            lines += [f"- {path}" for path in self.backups]
        lines.append("Any other copy made before — a `lucid backup` archive elsewhere, a copied "
                     "workspace — still holds it.")
        return "\n".join(lines)


def pattern_for(text: str) -> str:
    """A regex matching ``text`` case-insensitively with any whitespace between its words."""
    words = normalise(text).split(" ")
    return "(?i)" + r"\s+".join(re.escape(w) for w in words if w)


def purge_history(git: GitStore, text: str, *, backup_dirs: list[Path] | None = None) -> PurgeReport:
    """Rewrite the workspace's git history without ``text``; raises ``GitStoreError``."""
    if not normalise(text):
        raise ValueError("say what to purge")
    workspace = git.workspace
    pattern = pattern_for(text)
    compiled = re.compile(pattern.encode("utf-8"))
    with git.locked():
        before = _log(workspace)
        holding = _count_holding(workspace, compiled)
        if holding:
            _filter_repo(workspace, pattern)
            _git_stamp.drop(workspace)
            if compiled.search(_log(workspace, patches=True).encode("utf-8")):
                raise GitStoreError("git-filter-repo finished but a commit still holds the text")
    backups = sorted({p for folder in (backup_dirs or []) if folder.is_dir()
                      for p in folder.glob(BACKUP_GLOB)})
    logger.info("purge: history rewritten (%d of %d commit(s) held the text)", holding, before.count("\n"))
    return PurgeReport(before.count("\n"), holding, backups)


def _log(workspace: Path, *, patches: bool = False) -> str:
    args = ["log", "--all", "-p", "--no-ext-diff", "--format=%H%n%B"] if patches else ["log", "--all", "--format=%H"]
    done = run_git(args, cwd=workspace, workspace=workspace)
    if done.returncode != 0:
        raise GitStoreError(f"git log failed: {done.stderr.strip()}")
    return done.stdout


def _count_holding(workspace: Path, compiled: re.Pattern[bytes]) -> int:
    count = 0
    for sha in _log(workspace).split():
        shown = run_git(["show", "--no-ext-diff", "--format=%B", sha], cwd=workspace, workspace=workspace)
        count += bool(compiled.search(shown.stdout.encode("utf-8")))
    return count


def _filter_repo(workspace: Path, pattern: str) -> None:
    with tempfile.TemporaryDirectory(prefix="lucid-purge-") as scratch:
        expressions = Path(scratch) / "expressions.txt"
        expressions.write_text(f"regex:{pattern}==>{REDACTED}\n", encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "git_filter_repo", "--force", "--quiet",
             "--replace-text", str(expressions), "--replace-message", str(expressions)],
            cwd=workspace, env={**os.environ, **safe_env(workspace)},
            capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GitStoreError(f"git-filter-repo failed: {(done.stderr or done.stdout).strip()[-500:]}")
