"""Where an ``exec`` command runs: an allow-listed environment, and bubblewrap when present.

The environment is built from an allow-list (``PATH``, ``HOME``, ``LANG``, ``LC_*``, …
plus the names in ``tools.exec.passEnv``), never by scrubbing known secret names: an
unknown variable — ``DATABASE_URL``, ``GITHUB_PAT``, a proxy URL with a password in it —
does not reach a command unless the owner names it.

With ``tools.exec.sandbox: "auto"`` (the default) and ``bwrap`` (Debian's ``bubblewrap``)
on PATH, the command runs in its own namespaces:

    /                 read-only (the system's programs and libraries)
    workspace         read-write, and the working directory
    /home, /root      empty (no other home: not the config, not ~/.ssh)
    /tmp              private, empty
    /dev, /proc       minimal, the sandbox's own
    network           on, or off with ``tools.exec.network: false``
    processes         its own pid namespace: it cannot see or signal the gateway's

``"bwrap"`` requires it (a missing or broken bubblewrap refuses to run commands rather
than silently running them unconfined); ``"off"`` runs commands directly. Under the
hardened systemd unit user namespaces must be allowed for bubblewrap to work; the unit
and docs/operations.md say how (``RestrictNamespaces=`` lists ``user mnt pid`` …).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BASE_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def exec_env(environ: Mapping[str, str], pass_env: Iterable[str] = ()) -> dict[str, str]:
    """The environment a command gets: allow-listed names only."""
    allowed = set(BASE_ENV) | set(pass_env)
    env = {name: value for name, value in environ.items()
           if name in allowed or name.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How commands are wrapped; ``argv(shell_command, workspace)`` is what gets executed."""

    bwrap: str | None
    network: bool
    reason: str

    @property
    def active(self) -> bool:
        return self.bwrap is not None

    def argv(self, command: str, workspace: Path, *, hide: Sequence[Path] = (),
             read_only: Sequence[Path] = ()) -> list[str]:
        """``hide``: the config file (masked by ``/dev/null``) and folders (replaced by an empty
        one), wherever they are; the workspace is bound after them, so it stays visible even
        inside a hidden folder. ``read_only``: paths inside the workspace bound read-only over
        it (the owner-only ones: a command, approved or not, cannot rewrite them unseen)."""
        shell = ["/bin/sh", "-c", command]
        if self.bwrap is None:
            return shell
        ws = str(workspace.resolve())
        hidden: list[str] = []
        for path in (Path(p).resolve() for p in hide):
            if path.is_dir() and path != Path("/"):
                hidden += ["--tmpfs", str(path)]
            elif path.is_file():
                hidden += ["--ro-bind", "/dev/null", str(path)]
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp", "--tmpfs", "/home", "--tmpfs", "/root", "--tmpfs", "/run", *hidden,
                "--bind", ws, ws, *_read_only_binds(read_only), "--chdir", ws, "--setenv", "HOME", ws,
                "--unshare-all", "--die-with-parent"]
        if self.network:
            args.append("--share-net")
        return [*args, "--", *shell]


def _read_only_binds(paths: Sequence[Path]) -> list[str]:
    binds: list[str] = []
    for path in paths:
        if path.exists() and not path.is_symlink():  # a link would bind its target instead
            binds += ["--ro-bind", str(path), str(path)]
    return binds


def choose_sandbox(mode: str, *, network: bool = True, which: str | None = None) -> Sandbox:
    """The sandbox for ``tools.exec.sandbox`` (auto | bwrap | off); raises when bwrap is required
    but cannot run."""
    if mode == "off":
        return Sandbox(None, network, "off (tools.exec.sandbox is off)")
    path = which if which is not None else shutil.which("bwrap")
    works, why = _bwrap_works(path) if path else (False, "bwrap is not installed (apt install bubblewrap)")
    if works:
        return Sandbox(path, network, f"bubblewrap ({path}), network {'on' if network else 'off'}")
    if mode == "bwrap":
        raise SandboxUnavailable(f"tools.exec.sandbox is 'bwrap' but {why}")
    return Sandbox(None, network, f"off: {why}")


class SandboxUnavailable(RuntimeError):
    """``tools.exec.sandbox: bwrap`` and bubblewrap cannot run here."""


@functools.lru_cache(maxsize=4)
def _bwrap_works(path: str | None) -> tuple[bool, str]:
    """One real run: bubblewrap needs user namespaces, which a container or unit may forbid."""
    if not path:
        return False, "bwrap is not installed"
    try:
        # The same mounts a real run makes: under a hardened unit (ProtectKernelTunables=,
        # ProtectProc=) mounting a fresh /proc is refused, and then "auto" must say "off".
        probe = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "--", "/bin/true"],
                               capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap cannot start ({exc})"
    if probe.returncode != 0:
        detail = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no detail"]
        return False, f"bwrap cannot create namespaces here ({detail[0]})"
    return True, "ok"


def unsandboxed_reach() -> str:
    """What a command can reach when no sandbox runs it (the start warning, doctor, status)."""
    return ("they run as the gateway's user and can read every file that user can (the config "
            "file with its keys included), write anywhere that user can, and reach the network; "
            "install bubblewrap (apt-get install bubblewrap) to confine them to the workspace")


def describe(mode: str, network: bool) -> tuple[bool, str]:
    """(active, one line) for ``lucid status`` and ``lucid doctor``."""
    try:
        box = choose_sandbox(mode, network=network)
    except SandboxUnavailable as exc:
        return False, str(exc)
    return box.active, box.reason
