"""GitStore: version the long-term memory files so every Dream change can be undone.

The repository's work tree is the workspace, but it tracks ONLY ``SOUL.md``, ``USER.md``,
``memory/MEMORY.md`` and ``skills/`` (DESIGN §3): files are added by name, never with
``add -A``, and a ``.gitignore`` ignores everything else in case someone runs git by hand.
Sessions, history and config never enter the repository.

Every mutating operation holds ``memory/.git.lock`` so the gateway and a ``lucid dream``
beside it never interleave commits. Every git process runs with ``gitsafe.safe_env`` and
only after ``gitsafe.sanitize_repository``: nothing a repository's config or hooks name is
ever executed, whoever made the ``.git``. The synchronous methods do the git work; the
``a``-prefixed wrappers run them in a worker thread for async callers.

Paths go to and from git through ``gitpaths`` (NUL-separated, never quoted), so any name the
file system allows is committed as it is. A name git refuses (a folder spelled like ``.git``)
or that is not valid UTF-8 (it could not be written into a commit message or shown) is left
out of commits with a warning, and the rest is committed. A mutating operation that fails
raises ``GitStoreError`` saying what git said, and its outcome is kept in
``state/memory_commit.json`` (``CommitHealth``) for ``lucid doctor``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from lucidgate.memory import _git_stamp
from lucidgate.memory._gitignore import GITIGNORE, ours_but_old
from lucidgate.memory._gitfail import Refused, reporting
from lucidgate.memory._gitlog import CommitInfo, read_log
from lucidgate.memory.gitpaths import (add_paths, as_text, diff_names, ls_files, ls_tree_names, name_status,
                                       printable_name, representable)
from lucidgate.memory.commit_health import COMMIT_STATE, CommitHealth
from lucidgate.memory.errors import GitStoreError
from lucidgate.memory.gitsafe import pin_attributes, run_git, safe_env, sanitize_repository

if TYPE_CHECKING:  # GitPython loads on the first repository operation, not at import
    from git import Repo

logger = logging.getLogger(__name__)

__all__ = ["TRACKED", "CommitInfo", "GitStore", "is_tracked"]

TRACKED: tuple[str, ...] = ("SOUL.md", "USER.md", "memory/MEMORY.md", "skills")
# Daily notes (memory/YYYY-MM-DD.md) are versioned too; matched by name, added explicitly.
DAILY_NOTE_RE = re.compile(r"^memory/\d{4}-\d{2}-\d{2}\.md$")
IDENTITY_ENV = {
    "GIT_AUTHOR_NAME": "lucidgate",
    "GIT_AUTHOR_EMAIL": "lucidgate@localhost",
    "GIT_COMMITTER_NAME": "lucidgate",
    "GIT_COMMITTER_EMAIL": "lucidgate@localhost",
    "GIT_TERMINAL_PROMPT": "0",
}
_SHA_RE = re.compile(r"^[0-9a-fA-F]{4,40}$")
# The same message reaches a chat and the terminal: name both ways to list commits.
_LIST_COMMITS = "list the commits with `lucid memory log` (or /dream-log in a chat)"
_STALE_INDEX_LOCK_S = 60.0


class GitStore:
    def __init__(self, workspace: Path, *, lock_timeout_s: float = 60.0,
                 health: CommitHealth | None = None) -> None:
        self.workspace = Path(workspace)
        self._lock = FileLock(self.workspace / "memory" / ".git.lock", timeout=lock_timeout_s)
        self.health = health or CommitHealth(self.workspace / COMMIT_STATE)
        self._skipped: tuple[str, ...] = ()

    # ------------------------------------------------------------------ mutating operations
    def init(self) -> None:
        """Create the repository (first commit ``init: memory files``) unless it exists.
        Costs a few stat() calls when nothing changed since the last full commit (``_git_stamp``)."""
        if self._stamp_holds()[0]:
            return
        with self._reporting(), self._locked(), self._repo():
            pass

    def commit_manual_edits(self) -> str | None:
        """Commit edits made outside lucid (``manual: <files>``); None when there are none.
        Without a git process (or GitPython's import) when the stamp says nothing changed."""
        holds, files = self._stamp_holds()
        if holds:
            return None
        with self._reporting(), self._locked(), self._repo() as repo:
            sha = self._commit(repo, None)
            if not self._skipped:  # a name left out is a change still waiting
                _git_stamp.write(self.workspace, files)
            return sha

    def _stamp_holds(self) -> tuple[bool, dict[str, list[int] | None]]:
        files = _git_stamp.files_part(self.workspace, [*TRACKED, *sorted(self._daily_notes())])
        return _git_stamp.read(self.workspace) == _git_stamp.current(self.workspace, files), files

    def commit(self, message: str, paths: list[str] | None = None) -> str | None:
        """Commit the tracked files as they are now (only ``paths`` of them when given, so a
        hand edit elsewhere is not swept into this commit); None when nothing changed."""
        with self._reporting(), self._locked(), self._repo() as repo:
            return self._commit(repo, message, only=paths)

    def bundle(self, target: Path) -> bool:
        """Write the whole memory history as a git bundle; False when there is none yet."""
        if not (self.workspace / ".git").exists():
            return False
        with self._locked(), self._repo(create=False) as repo:
            if not repo.head.is_valid():
                return False
            repo.git.bundle("create", str(target), "--all")
            return True

    def adopt_bundle(self, bundle: Path) -> str | None:
        """Take the memory history from a ``git bundle`` (``lucid export``/``backup``), after
        ``git bundle verify``; returns None when adopted, else why it was not (the history
        then starts fresh). Only ``refs/heads/main`` is taken."""
        from git.exc import GitCommandError

        with self._locked(), self._repo() as repo:
            try:
                repo.git.bundle("verify", "-q", str(bundle))
                heads = repo.git.bundle("list-heads", str(bundle), "refs/heads/main")
            except GitCommandError as exc:
                return f"the bundle did not verify ({(exc.stderr or '').strip() or exc})"
            if "refs/heads/main" not in heads:
                return "the bundle has no main branch"
            repo.git.fetch("--no-tags", str(bundle), "+refs/heads/main:refs/heads/main", "--update-head-ok")
            repo.git.reset("-q", "main")  # the index follows the history; the files are in place
            return None

    def restore(self, sha: str) -> str:
        """A NEW commit bringing the files ``sha`` changed back to their state before it."""
        with self._reporting(), self._locked(), self._repo() as repo:
            target = self._resolve(repo, sha)
            parents = repo.git.rev_list("--parents", "-n", "1", target).split()[1:]
            if not parents:
                raise Refused(
                    f"{target[:8]} is the first commit; there is no earlier state to restore"
                )
            self._commit(repo, None)  # keep unsaved hand edits in history before overwriting
            before = parents[0]
            # Only the files this commit changed go back; what later commits added or changed
            # elsewhere (a new skill, another file) is left alone.
            touched = [f for f in diff_names(repo.git, before, target) if is_tracked(f)]
            differs = set(diff_names(repo.git, before, "HEAD", paths=touched)) if touched else set()
            changed = [f for f in touched if f in differs]
            if not changed:
                raise Refused(
                    f"nothing to restore: the memory files already match the state before "
                    f"{target[:8]}"
                )
            present = set(ls_tree_names(repo.git, before, changed))
            if present:
                repo.git.checkout(before, "--", *sorted(present))
            gone = [f for f in changed if f not in present]
            if gone:
                repo.git.rm("-q", "-f", "--", *gone)
            sha_new = self._commit(repo, f"restore: before {target[:8]}")
            if sha_new is None:  # pragma: no cover - the diff above said otherwise
                raise GitStoreError(f"restoring to before {target[:8]} changed nothing")
            logger.info("memory files restored to before %s as %s", target[:8], sha_new[:8])
            return sha_new

    # ------------------------------------------------------------------ reading
    def log(self, n: int = 20, *, prefix: str | None = None) -> list[CommitInfo]:
        """The newest ``n`` commits (optionally only those whose message starts with ``prefix``)."""
        if not (self.workspace / ".git").exists():
            return []
        with self._repo(create=False) as repo:
            if not repo.head.is_valid():
                return []
            return read_log(repo.git, n, prefix=prefix)

    def diff(self, sha: str) -> str:
        """The patch a commit made (the root commit shows its whole content), with what the
        owner asked to forget redacted: the commit may predate the forget."""
        from lucidgate.memory.tombstones import Tombstones

        if not (self.workspace / ".git").exists():
            raise GitStoreError("memory is not versioned yet; nothing to show")
        with self._repo(create=False) as repo:
            target = self._resolve(repo, sha)
            patch = as_text(repo.git.show("--no-color", "--no-ext-diff", "--no-textconv", "--patch",
                                          "--format=medium", target, "--"))
        return Tombstones(self.workspace).matcher().redact(patch)

    def changes(self, sha: str) -> list[tuple[str, str]]:
        """``(status, path)`` of each file a commit changed, in the order ``diff`` shows them
        (the patch's own headers quote unusual names; these are the names as they are)."""
        with self._repo(create=False) as repo:
            return [(status, as_text(path)) for status, path in name_status(repo.git, self._resolve(repo, sha))]

    # ------------------------------------------------------------------ async wrappers
    def locked(self) -> AbstractContextManager[None]:
        """Hold the memory git lock (for a tool that rewrites the repository itself)."""
        return self._locked()

    async def ainit(self) -> None:
        await asyncio.to_thread(self.init)

    async def acommit_manual_edits(self) -> str | None:
        return await asyncio.to_thread(self.commit_manual_edits)

    async def acommit(self, message: str) -> str | None:
        return await asyncio.to_thread(self.commit, message)

    async def arestore(self, sha: str) -> str:
        return await asyncio.to_thread(self.restore, sha)

    async def alog(self, n: int = 20, *, prefix: str | None = None) -> list[CommitInfo]:
        return await asyncio.to_thread(self.log, n, prefix=prefix)

    async def adiff(self, sha: str) -> str:
        return await asyncio.to_thread(self.diff, sha)

    async def achanges(self, sha: str) -> list[tuple[str, str]]:
        return await asyncio.to_thread(self.changes, sha)

    # ------------------------------------------------------------------ internals
    def _reporting(self) -> AbstractContextManager[None]:
        self._skipped = ()
        return reporting(self.health, self.workspace, lambda: self._skipped)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        (self.workspace / "memory").mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout as exc:
            raise GitStoreError(
                f"{self._lock.lock_file} stayed locked for {self._lock.timeout:.0f} s; another "
                "lucid process is committing memory — retry when it is done"
            ) from exc
        try:
            yield
        finally:
            self._lock.release()

    @contextmanager
    def _repo(self, *, create: bool = True) -> Iterator[Repo]:
        """Open the workspace repository, re-creating it when missing or broken."""
        from git import Repo
        from git.exc import InvalidGitRepositoryError, NoSuchPathError

        git_dir = self.workspace / ".git"
        repo: Repo | None = None
        if git_dir.exists() or git_dir.is_symlink():
            try:
                sanitize_repository(self.workspace)  # before anything reads its config
                repo = Repo(self.workspace)
            except (InvalidGitRepositoryError, NoSuchPathError, GitStoreError) as exc:
                if not create:
                    raise GitStoreError(f"{git_dir} is not a usable repository") from exc
                aside = git_dir.with_name(f".git.broken-{time.strftime('%Y%m%d%H%M%S')}")
                logger.warning("%s is not a usable repository; moved it to %s", git_dir, aside.name)
                shutil.move(str(git_dir), aside)
        elif not create:
            raise GitStoreError("memory is not versioned yet")
        fresh = repo is None
        if repo is None:
            if git_dir.exists():
                logger.warning("re-initialising the memory repository in %s", self.workspace)
            else:
                logger.info("initialising the memory repository in %s", self.workspace)
            made = run_git(["init", "-q", "-b", "main", str(self.workspace)], cwd=self.workspace)
            if made.returncode != 0:
                raise GitStoreError(f"git init failed in {self.workspace}: {made.stderr.strip()}")
            repo = Repo(self.workspace)
            pin_attributes(git_dir)  # before the first commit reads any .gitattributes
        try:
            repo.git.update_environment(**{**safe_env(self.workspace), **IDENTITY_ENV})
            ignore = self.workspace / ".gitignore"
            if fresh or not ignore.exists() or ours_but_old(ignore):
                ignore.write_text(GITIGNORE, encoding="utf-8")
            if create and not repo.head.is_valid():
                self._commit(repo, "init: memory files", allow_empty=True)
            yield repo
        finally:
            repo.close()

    def _resolve(self, repo: Repo, sha: str) -> str:
        """Full sha of a commit on our history; a clear error for anything else."""
        text = (sha or "").strip()
        # Validate before git sees it: a "sha" from chat must never become a git option.
        if not _SHA_RE.match(text):
            raise Refused(f"{sha!r} is not a commit id; {_LIST_COMMITS}")
        from git.exc import GitCommandError

        try:
            full = repo.git.rev_parse("--verify", "--quiet", f"{text}^{{commit}}").strip()
            repo.git.merge_base("--is-ancestor", full, "HEAD")
        except GitCommandError:
            raise Refused(
                f"unknown commit {text!r}; {_LIST_COMMITS}"
            ) from None
        return full

    def _commit(self, repo: Repo, message: str | None, *, allow_empty: bool = False,
                only: list[str] | None = None) -> str | None:
        """Stage the tracked files by name and commit them; ``message=None`` = manual edits."""
        changed = self._stage(repo)
        if only is not None:
            wanted = {p.rstrip("/") for p in only}
            changed = [f for f in changed if f in wanted or any(f.startswith(w + "/") for w in wanted)]
        if not changed and not allow_empty:
            return None
        if message is None:
            shown = ", ".join(changed[:5]) + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else "")
            message = f"manual: {shown}"
        args = ["--no-verify", "--no-gpg-sign", "-q", "-m", message]
        if allow_empty:
            args.append("--allow-empty")
        # Naming the paths commits only them, even if someone staged other files by hand.
        repo.git.commit(*args, *(["--", *changed] if changed else []))
        sha = repo.head.commit.hexsha
        logger.info("memory commit %s: %s", sha[:8], message)
        return sha

    def _stage(self, repo: Repo) -> list[str]:
        """``git add`` the tracked paths; the files whose staged state differs from HEAD."""
        self._clear_stale_index_lock()
        from git.exc import GitCommandError

        try:
            known = ls_files(repo.git, *TRACKED)
        except GitCommandError as exc:
            if "index" not in str(exc).lower():
                raise GitStoreError(f"git failed: {exc.stderr.strip()}") from exc
            self._rebuild_index(repo)
            known = ls_files(repo.git, *TRACKED)
        paths = [p for p in TRACKED
                 if (self.workspace / p).exists() or any(k == p or k.startswith(p + "/") for k in known)]
        refused = add_paths(repo.git, paths) if paths else []
        notes = sorted(set(self._daily_notes()) | {k for k in ls_files(repo.git, "memory")
                                                     if DAILY_NOTE_RE.match(k)})
        if notes:
            # -f: a .gitignore from before daily notes were versioned must not refuse them.
            refused += add_paths(repo.git, notes, "-f", "-A")
        # With an unborn HEAD, git compares the index against the empty tree.
        staged = diff_names(repo.git, "--cached", paths=[*TRACKED, *notes])
        # Git would store a name that is not UTF-8, but no message, log or answer could name it.
        undecodable = [p for p in staged if not representable(p)]
        if undecodable:
            self._unstage(repo, undecodable)
        self._skipped = tuple(sorted(printable_name(p) for p in [*refused, *undecodable]))
        if self._skipped:
            logger.warning("not committing %d memory file(s): git reserves the name or it is not valid "
                           "UTF-8 (rename them): %s", len(self._skipped), ", ".join(self._skipped))
        return [p for p in staged if representable(p)]

    def _unstage(self, repo: Repo, paths: list[str]) -> None:
        if repo.head.is_valid():
            repo.git.reset("-q", "HEAD", "--", *paths)
        else:
            repo.git.rm("-q", "--cached", "-r", "--", *paths)

    def _daily_notes(self) -> list[str]:
        folder = self.workspace / "memory"
        if not folder.is_dir():
            return []
        return [f"memory/{p.name}" for p in folder.iterdir()
                if p.is_file() and DAILY_NOTE_RE.match(f"memory/{p.name}")]

    def _rebuild_index(self, repo: Repo) -> None:
        index = Path(repo.git_dir) / "index"
        logger.warning("git index in %s is corrupt; rebuilding it from HEAD", repo.git_dir)
        index.unlink(missing_ok=True)
        if repo.head.is_valid():
            repo.git.reset("-q")

    def _clear_stale_index_lock(self) -> None:
        # We hold .git.lock, so an old index.lock is a crashed git's leftover, not a live one.
        lock = self.workspace / ".git" / "index.lock"
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return
        if age > _STALE_INDEX_LOCK_S:
            logger.warning("removing stale %s (%.0f s old)", lock, age)
            lock.unlink(missing_ok=True)


def is_tracked(path: str) -> bool:
    """Whether ``path`` (workspace-relative, posix) is one of the versioned memory files."""
    return (path in TRACKED or path.startswith("skills/") or DAILY_NOTE_RE.match(path) is not None)


