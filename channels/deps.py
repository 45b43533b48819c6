"""What the composition root gives a channel as it is built: one ``ChannelDeps`` for them all.

Every registry factory is ``build(config, deps) -> Channel``. A channel takes from ``deps``
the parts it uses and nothing is handed to it later, so a built channel is complete: the
bus it publishes on, the workspace its own state files go under, the slash commands (a
platform menu), the read-only transcript view (the webhook's sessions API, the web chat's
tool calls) and the one pairing store every access gate shares. Channels never import the
gateway, so the view is a protocol here; ``memory/sessions_view.py`` ``SessionsOnDisk`` is
the one the root passes.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lucidgate.channels.base import CommandSpec
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.pairing import PairingStore

__all__ = ["ChannelDeps", "TranscriptReader"]


class TranscriptReader(Protocol):
    """Read access to transcripts: what the webhook's sessions API and the web chat read."""

    async def list(self, prefix: str, limit: int) -> builtins.list[dict[str, Any]]: ...

    async def recent(self, key: str, limit: int) -> dict[str, Any] | None: ...

    async def said(self, key: str, after: int, limit: int) -> builtins.list[dict[str, Any]] | None: ...

    async def turn_tools(self, key: str) -> builtins.list[dict[str, Any]]: ...

    def for_agent(self, agent: str) -> TranscriptReader | None:
        """Another agent's transcripts by its id ("": these); None for an unknown id."""
        ...

    @property
    def agents(self) -> builtins.list[str]:
        """The other agents' ids (empty with one agent)."""
        ...

    @property
    def default(self) -> str:
        """The default agent's id, whose transcripts these are."""
        ...


@dataclass(frozen=True, slots=True)
class ChannelDeps:
    """The parts a channel may use, built once by the root and passed to every factory.

    ``sessions`` is None where nobody reads transcripts (``lucid agent``, a test's channel
    alone): the webhook's sessions API then answers 503 and the web chat shows no tool calls.
    """

    bus: MessageBus
    workspace: Path
    pairing: PairingStore
    commands: tuple[CommandSpec, ...] = ()
    sessions: TranscriptReader | None = None
