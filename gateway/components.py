"""The gateway's parts whose life is more than their own ``start``/``stop``, as components.

Most parts (the scheduler, MCP, the recall index, approvals, each channel) already are
components and are registered as they are. These few need a word more: what "alive" means
for them, a failure that must not stop the gateway, or a stop that takes an argument. Each
calls its part's methods when it runs, never earlier, so a part is the one object doing the
work. The composition root (gateway/app.py) registers them with the rest, in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from lucidgate.memory.errors import GitStoreError

if TYPE_CHECKING:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.gateway.agent.loop import AgentLoop
    from lucidgate.gateway.model.client import LiteLLMChatModel
    from lucidgate.memory.gitstore import GitStore

logger = logging.getLogger(__name__)

__all__ = ["AgentRun", "Grace", "History", "Intake", "ModelClient", "WorkspaceFiles"]


class Grace:
    """How long running turns get to finish when the gateway stops. ``Gateway.stop`` sets it
    (the configured period, or what a drain left); the agent's component reads it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class WorkspaceFiles:
    """The workspace: its templates installed at start (in a thread); alive while a file can
    be created in it (``probe``, also in a thread — a hung disk must not stall the loop)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._last = (True, str(workspace))

    async def start(self) -> None:
        from lucidgate.config.onboard import install_templates

        await asyncio.to_thread(install_templates, self.workspace)

    async def stop(self) -> None:
        return None

    async def probe(self) -> None:
        self._last = await asyncio.to_thread(_writable, self.workspace)

    def alive(self) -> tuple[bool, str]:
        return self._last


class History:
    """The memory repository, created at start — or not: a broken history must not keep the
    assistant from answering. The failure is logged, reported here and kept for ``lucid doctor``."""

    def __init__(self, git: GitStore) -> None:
        self.git = git
        self._problem: str | None = None

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.git.init)
        except GitStoreError as exc:
            self._problem = str(exc)
            logger.error("memory versioning failed (%s); running on without it — see `lucid doctor`", exc)

    async def stop(self) -> None:
        return None

    def alive(self) -> tuple[bool, str]:
        # Not a readiness failure: the assistant answers without versioning.
        return True, "versioned" if self._problem is None else f"not versioned: {self._problem}"


class ModelClient:
    """The model client: litellm imported and its I/O thread opened at start; at stop, token
    calibration still counting finishes before the thread closes. Alive when a model is
    configured (the last call's result is the daemon's to add)."""

    def __init__(self, model: LiteLLMChatModel, configured_model: str) -> None:
        self.model = model
        self.configured_model = configured_model

    async def start(self) -> None:
        await self.model.start()

    async def stop(self) -> None:
        try:
            await self.model.settle()
        finally:
            self.model.close()

    def alive(self) -> tuple[bool, str]:
        ok, why = self.model.configured()
        return ok, self.configured_model if ok else why


class Intake:
    """The message bus: its inbox journal replayed at start, closed at stop. Alive while it
    accepts messages; "starting" before, "shutting down" once intake closed (a drain)."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self._started = False

    async def start(self) -> None:
        await self.bus.start()
        self._started = True

    async def stop(self) -> None:
        await self.bus.stop()

    def alive(self) -> tuple[bool, str]:
        if not self._started:
            return False, "starting"
        return (True, "accepting messages") if self.bus.accepting else (False, "shutting down")


class AgentRun:
    """The agent loop: its consumer and resumer started; at stop, running turns get the
    ``Grace`` period. Alive while both long-lived tasks run (``AgentLoop.alive``)."""

    def __init__(self, agent: AgentLoop, grace: Grace) -> None:
        self.agent = agent
        self.grace = grace

    async def start(self) -> None:
        await self.agent.start()

    async def stop(self) -> None:
        await self.agent.stop(self.grace.seconds)

    def alive(self) -> tuple[bool, str]:
        return self.agent.alive()


def _writable(workspace: Path) -> tuple[bool, str]:
    try:
        fd, path = tempfile.mkstemp(dir=workspace, prefix=".readyz.")
        os.close(fd)
        os.unlink(path)
    except OSError as exc:
        return False, f"{workspace} is not writable ({exc.strerror or exc})"
    return True, str(workspace)
