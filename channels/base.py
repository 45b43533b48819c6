"""The short contract every channel adapter implements, and optional abilities.

A channel turns platform events into ``InboundMessage``s on the bus and delivers
``OutboundMessage``s. It knows nothing about the agent. Optional abilities are separate
runtime-checkable protocols rather than no-op hooks on a base class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lucidgate.channels.messages import OutboundMessage
from lucidgate.config.errors import ConfigError

if TYPE_CHECKING:
    from fastapi import APIRouter

    from lucidgate.channels.webhook.api import WebhookRateLimits


class ChannelUnavailable(ConfigError):
    """A channel's ``build`` refuses (a missing token…); the message says why and what to set."""


def refuse_if(reason: str | None) -> None:
    """A ``build``'s first step: refuse with ``preflight``'s reason, when it found one."""
    if reason is not None:
        raise ChannelUnavailable(reason)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One slash command as a channel may advertise it (a menu): the gateway's registry is the
    source, handed to ``build(..., commands=...)`` because channels never import the gateway."""

    name: str
    description: str
    owner_only: bool = False


@runtime_checkable
class Channel(Protocol):
    name: str

    async def start(self) -> None:
        """Connect and begin publishing inbound messages; return once running."""

    async def stop(self) -> None:
        """Stop intake and release clients; idempotent."""

    async def send(self, msg: OutboundMessage) -> None:
        """Deliver one outbound message (text, typing, progress or error)."""


@runtime_checkable
class HasRouter(Protocol):
    """A channel that receives platform events over HTTP mounts a router on the gateway app."""

    def router(self) -> APIRouter: ...


@runtime_checkable
class SharesIntakeLimits(Protocol):
    """An HTTP intake that takes bearer credentials (the webhook, the OpenAI endpoint). Built
    together, they count against one set of per-credential and global limits: a credential
    that two endpoints accept gets one allowance, not one per endpoint."""

    intake_limits: WebhookRateLimits

    def share_intake_limits(self, limits: WebhookRateLimits) -> None: ...


@runtime_checkable
class HasOwners(Protocol):
    """A channel that can tell whether a sender is one of its configured owners."""

    def is_owner(self, sender_id: str) -> bool: ...
