"""Running git on the memory repository without running anything the repository asks for.

Git executes commands named in a repository's own files: hooks, ``core.fsmonitor``,
``core.pager``, ``core.sshCommand``, filter and diff drivers (``filter.<x>.clean``,
``diff.<x>.textconv``), ``diff.external``, and ``include.path`` pulls in more of the same.
``git clone`` never copies these, but an archive, a backup or a copied folder does, and a
workspace's ``.git`` may come from anyone's archive. Git's own advice for such a directory
is not to run git in it before sanitising it. So every git call lucidgate makes:

1. runs with ``safe_env()``: system and global config ignored (``GIT_CONFIG_NOSYSTEM``,
   ``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_ATTR_NOSYSTEM``), and the settings that name a
   program overridden through ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n`` — environment
   config outranks the repository's file (hooks path ``/dev/null``, fsmonitor off, pager
   ``cat``, ssh/editor/askpass ``false``, transports other than local files refused),
   paths unquoted and every pathspec literal (a file name is never a glob or magic);
2. on a repository whose ``.git/config`` holds anything beyond a short allow-list
   (format version, file mode, bare=false, reflog, case, user, remotes and branches — none
   of which run anything), first rewrites that file to the allowed entries and moves any
   hook out of ``.git/hooks``; a ``.git`` that is a link, a ``gitdir:`` file or borrows a
   common dir is not ours and is refused.

Driver names are free-form, so they cannot all be overridden from outside: the allow-list
is what removes them. Reading the file with ``git config --file`` runs nothing.

3. pins ``.git/info/attributes`` to ``PINNED_ATTRIBUTES``, which resets every attribute that
   changes what git reads or writes for a path (encoding, line endings, filters, keyword
   expansion, diff and merge handling) to "unspecified". Git consults that file before any
   ``.gitattributes`` in the work tree (in any folder), and no setting turns in-tree attribute
   files off, so this is what keeps one planted there (``working-tree-encoding=UTF-16LE``)
   from turning memory diffs binary or a restore into a UTF-16 rewrite of MEMORY.md.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from lucidgate.memory.errors import GitStoreError

logger = logging.getLogger(__name__)

__all__ = ["PINNED_ATTRIBUTES", "SAFE_CONFIG", "pin_attributes", "sanitize_repository", "safe_env", "run_git"]

# Every setting that could name a program, pinned to something inert.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", "false"),
    ("core.gitProxy", "false"),
    ("core.untrackedCache", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),  # a bundle file is the only thing we ever fetch
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("core.quotePath", "false"),  # paths as they are; lucidgate reads them NUL-separated anyway
)
# "!attr" makes an attribute unspecified, whatever a lower-precedence file set: git's
# defaults apply (content sniffing for binary, no conversion, no driver).
PINNED_ATTRIBUTES = ("# written by lucidgate: memory files are stored and diffed as they are\n"
                     "* !working-tree-encoding !text !eol !crlf !filter !diff !merge !ident "
                     "!export-subst !export-ignore !whitespace\n")
_ALLOWED_KEYS = frozenset({
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
    "core.ignorecase", "core.precomposeunicode", "core.symlinks", "user.name", "user.email",
})
_ALLOWED_PATTERNS = (re.compile(r"^remote\.[^.]+(\..+)?\.(url|fetch|pushurl)$"),
                     re.compile(r"^branch\.[^.]+(\..+)?\.(remote|merge)$"))


def safe_env(workspace: Path | None = None) -> dict[str, str]:
    """Environment overrides for every git process (see the module docstring)."""
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_CONFIG_PARAMETERS": "",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "false",
        "SSH_ASKPASS": "false",
        "GIT_EXTERNAL_DIFF": "",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_EDITOR": "false",
        "GIT_SSH_COMMAND": "false",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_LITERAL_PATHSPECS": "1",  # a file named "*" or ":(top)x" means that file only
        "GIT_CONFIG_COUNT": str(len(SAFE_CONFIG)),
    }
    for n, (key, value) in enumerate(SAFE_CONFIG):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    if workspace is not None:  # pinned: a GIT_DIR from the caller's shell must not redirect us
        env["GIT_DIR"] = str(workspace / ".git")
        env["GIT_WORK_TREE"] = str(workspace)
        env["GIT_INDEX_FILE"] = str(workspace / ".git" / "index")
    return env


def run_git(args: list[str], *, cwd: Path, workspace: Path | None = None) -> subprocess.CompletedProcess[str]:
    """One git command with ``safe_env`` (blocking; for the few calls outside GitPython)."""
    git = shutil.which("git") or "git"
    return subprocess.run([git, *args], cwd=cwd, env={**os.environ, **safe_env(workspace)},
                          capture_output=True, text=True, check=False)


def sanitize_repository(workspace: Path) -> list[str]:
    """Make ``workspace/.git`` hold nothing that runs; returns what was removed.

    Raises ``GitStoreError`` for a ``.git`` that is not a plain directory of this workspace."""
    git_dir = workspace / ".git"
    if git_dir.is_symlink() or (git_dir.exists() and not git_dir.is_dir()):
        raise GitStoreError(f"{git_dir} is a link or a file, not the workspace's own repository")
    if not git_dir.is_dir():
        return []
    if (git_dir / "commondir").exists():
        raise GitStoreError(f"{git_dir} borrows another repository's files (commondir)")
    removed: list[str] = []
    config = git_dir / "config"
    if config.is_symlink():
        config.unlink()
        removed.append("config (a link)")
    entries = _config_entries(config, workspace)
    unsafe = [key for key, _ in entries if not _allowed(key)]
    if any(key == "core.bare" and value.lower() in ("true", "yes", "on", "1") for key, value in entries):
        unsafe.append("core.bare")
    if unsafe:
        _rewrite_config(config, [(k, v) for k, v in entries if _allowed(k) and k != "core.bare"], workspace)
        removed.extend(sorted(set(unsafe)))
    removed.extend(_disable_hooks(git_dir))
    worktree_config = git_dir / "config.worktree"
    if worktree_config.exists() or worktree_config.is_symlink():
        worktree_config.unlink()
        removed.append("config.worktree")
    if pin_attributes(git_dir):
        removed.append("info/attributes")
    if removed:
        logger.warning("%s held settings or hooks that run programs; removed: %s", git_dir, ", ".join(removed))
    return removed


def pin_attributes(git_dir: Path) -> bool:
    """Make ``git_dir/info/attributes`` hold exactly ``PINNED_ATTRIBUTES``; True when it held
    something else (a link, other rules) that was replaced. A missing file is written quietly."""
    info = git_dir / "info"
    if info.is_symlink() or (info.exists() and not info.is_dir()):
        info.unlink()
    info.mkdir(exist_ok=True)
    path = info / "attributes"
    replaced = False
    if path.is_symlink() or (path.exists() and not path.is_file()):
        path.unlink()
        replaced = True
    elif path.exists():
        if path.read_text(encoding="utf-8", errors="replace") == PINNED_ATTRIBUTES:
            return False
        replaced = True
    tmp = info / f"attributes.lucid-{os.getpid()}.tmp"
    tmp.write_text(PINNED_ATTRIBUTES, encoding="utf-8")
    os.replace(tmp, path)
    return replaced


def _allowed(key: str) -> bool:
    key = key.lower()
    return key in {k.lower() for k in _ALLOWED_KEYS} or any(p.match(key) for p in _ALLOWED_PATTERNS)


def _config_entries(config: Path, workspace: Path) -> list[tuple[str, str]]:
    if not config.exists():
        return []
    # --file reads that one file; includes are not followed without --includes.
    result = run_git(["config", "--file", str(config), "--no-includes", "--list", "--null"], cwd=workspace)
    if result.returncode != 0:
        return [("unreadable.config", "")]
    entries: list[tuple[str, str]] = []
    for record in result.stdout.split("\0"):
        if record:
            key, _, value = record.partition("\n")
            entries.append((key, value))
    return entries


def _rewrite_config(config: Path, keep: list[tuple[str, str]], workspace: Path) -> None:
    tmp = config.with_name(f"config.lucid-{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    version = next((v for k, v in keep if k.lower() == "core.repositoryformatversion"), "0")
    rest = [(k, v) for k, v in keep if k.lower() != "core.repositoryformatversion"]
    for key, value in [("core.repositoryformatversion", version), ("core.bare", "false"), *rest]:
        done = run_git(["config", "--file", str(tmp), "--add", key, value], cwd=workspace)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise GitStoreError(f"could not rewrite {config}: {done.stderr.strip()}")
    os.replace(tmp, config)


def _disable_hooks(git_dir: Path) -> list[str]:
    hooks = git_dir / "hooks"
    if hooks.is_symlink():
        hooks.unlink()
        return ["hooks (a link)"]
    if not hooks.is_dir():
        return []
    live = [p for p in hooks.iterdir() if not p.name.endswith(".sample")]
    if not live:
        return []
    aside = git_dir / f"hooks.disabled-{time.strftime('%Y%m%d%H%M%S')}"
    aside.mkdir(mode=0o700, exist_ok=True)
    for path in live:
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o600)  # kept for the owner to read, never to run
        os.replace(path, aside / path.name)
    return [f"hooks/{p.name}" for p in live]
