"""What the console's routes share: the gateway, the auth book, the web chat, the clock."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Depends, Request

from channels.web import WebChannel
from gateway.console.auth import ConsoleAuth, ConsoleSession

if TYPE_CHECKING:
    from gateway.runtime import Gateway, GatewayParts
    from scheduler import SchedulerService

TAG = "console"
# Every console route documents its refusals the same way.
REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No console session (or it expired): log in first."},
    403: {"description": "A state-changing request without this host's Origin or the CSRF token."},
}


@dataclass
class ConsoleContext:
    gateway: Gateway
    auth: ConsoleAuth
    web: WebChannel
    version: str
    started: float = field(default_factory=time.monotonic)

    @property
    def parts(self) -> GatewayParts:
        return self.gateway.parts

    def scheduler(self) -> SchedulerService | None:
        return self.gateway.parts.scheduler


def owner_dependency(ctx: ConsoleContext) -> Any:
    """``Depends(...)`` for routes: the owner's session, Origin/CSRF-checked when unsafe."""
    def require(request: Request) -> ConsoleSession:
        return ctx.auth.require(request)

    return Depends(require)
