"""One lucid process per workspace: an exclusive ``flock`` on ``workspace/gateway.lock``.

Held by ``lucid gateway`` for its whole life, and by ``lucid agent`` while it runs the agent
in-process (when no gateway answers), so two agents never write one workspace's
transcripts, inbox and jobs at once. The kernel drops the lock if the process dies.

A gateway with several agents (``agents.list``) holds every agent's workspace
(``WorkspaceLocks`` over ``gateway_workspaces``): a second daemon whose workspace is one of
them, as its default or as any of its agents', is refused like a second gateway on one workspace.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from lucidgate.config.errors import LucidError
from lucidgate.config.schema import Config

LOCK_NAME = "gateway.lock"


class GatewayLocked(LucidError):
    """Another gateway already runs for this workspace."""


Purpose = Literal["agent", "gateway", "import"]

# What the refused process should do next depends on what it was: a terminal chat can talk to
# the running gateway, a second gateway or an import cannot share the workspace at all.
_NEXT_STEP: dict[Purpose, str] = {
    "agent": ("To chat from several terminals at once, run `lucid gateway` (or the service) instead: "
              "every `lucid agent` then talks to it. Otherwise stop that process, or use another "
              "workspace (agents.defaults.workspace)"),
    "gateway": ("One gateway serves a workspace: if it is the service, `systemctl status lucidgate` "
                "(or `systemctl --user status lucidgate`) shows it; otherwise stop that process (or the `lucid agent` running "
                "in-process), or give this config another workspace (agents.defaults.workspace)"),
    "import": ("An import writes the workspace while nothing else does: stop that process (the "
               "gateway or the service, or `lucid agent`), run the import, then start it again"),
}


class WorkspaceLock:
    """An exclusive ``flock`` on ``workspace/gateway.lock``, released when the process ends.

    ``purpose`` (what this process is) picks the advice given when another one holds it."""

    def __init__(self, workspace: Path, purpose: Purpose = "agent") -> None:
        self.path = workspace / LOCK_NAME
        self.purpose = purpose
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise GatewayLocked(
                f"already running{who}: another lucid process (a gateway, or lucid agent) holds the "
                f"workspace {self.path.parent}. {_NEXT_STEP[self.purpose]}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> WorkspaceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def gateway_workspaces(config: Config) -> list[Path]:
    """Every workspace a gateway for ``config`` writes: each agent's (the default first), and
    ``agents.defaults.workspace``, where it announces its address (once each)."""
    found: dict[Path, None] = {}
    for path in [*(config.for_agent(a).workspace for a in config.agent_ids()), config.workspace]:
        found.setdefault(path.expanduser().resolve(), None)
    return list(found)


class WorkspaceLocks:
    """``WorkspaceLock`` on each of several workspaces, all or none: if one is held elsewhere,
    those taken already are released and that one's ``GatewayLocked`` is raised."""

    def __init__(self, workspaces: Iterable[Path], purpose: Purpose = "gateway") -> None:
        self.locks = [WorkspaceLock(path, purpose) for path in workspaces]

    def acquire(self) -> None:
        taken: list[WorkspaceLock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()

    def __enter__(self) -> WorkspaceLocks:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
