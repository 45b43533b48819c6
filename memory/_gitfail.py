"""How a GitStore operation fails: one ``GitStoreError`` saying what git said, and a record.

A failed git command surfaces as GitPython's ``GitCommandError`` (its message is the whole
command line); a broken repository as other ``GitError``s, ``OSError`` or ``ValueError``.
``reporting`` turns each into a ``GitStoreError`` with git's own words in one line and
records the outcome in ``CommitHealth``, so a caller that only logs the failure (a turn, a
start) still leaves ``lucid doctor`` something to report. A ``Refused`` request (an unknown
commit, nothing to restore) is the caller's mistake, not the store's: it is not recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lucidgate.memory.commit_health import CommitHealth
from lucidgate.memory.errors import GitStoreError

__all__ = ["Refused", "describe", "reporting"]


class Refused(GitStoreError):
    """A request the store turns down (an unknown commit, nothing to restore)."""


def describe(exc: Exception) -> str:
    """``git commit failed: <what git printed>``, in one line."""
    command = [str(a) for a in (getattr(exc, "command", None) or [])]
    verb = next((a for a in command[1:] if not a.startswith("-")), "command")
    said = str(getattr(exc, "stderr", "") or "").strip()
    said = said.removeprefix("stderr:").strip().strip("'").strip()
    return f"git {verb} failed: {' '.join(said.split()) or exc}"


@contextmanager
def reporting(health: CommitHealth, workspace: Path, skipped: Callable[[], tuple[str, ...]]) -> Iterator[None]:
    """Run one store operation; ``skipped()`` names what a successful one left out."""
    from git.exc import GitCommandError, GitError

    try:
        yield
    except Refused:
        raise
    except GitStoreError as exc:
        health.failed(str(exc))
        raise
    except GitCommandError as exc:
        error = GitStoreError(describe(exc))
        health.failed(str(error))
        raise error from exc
    except (GitError, OSError, ValueError) as exc:
        error = GitStoreError(f"the memory repository in {workspace} failed: {exc}")
        health.failed(str(error))
        raise error from exc
    health.succeeded(skipped())
