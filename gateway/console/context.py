"""What the console's routes share: the auth book, the web chat, the version and start time.

Each route module's ``router(...)`` takes the owner dependency and only the parts of the gateway it
uses, handed in by ``mount_console``; none reaches into the gateway for more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request

from lucidgate.channels.web import WebChannel
from lucidgate.gateway.console.auth import ConsoleAuth, ConsoleSession

TAG = "console"
# Every console route documents its refusals the same way.
REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No console session (or it expired): log in first."},
    403: {"description": "A state-changing request without this host's Origin or the CSRF token."},
}


@dataclass
class ConsoleContext:
    auth: ConsoleAuth
    web: WebChannel | None  # None: channels.web is off, the console has no chat
    version: str
    started: float = field(default_factory=time.monotonic)


def owner_dependency(auth: ConsoleAuth) -> Any:
    """``Depends(...)`` for routes: the owner's session, Origin/CSRF-checked when unsafe."""
    def require(request: Request) -> ConsoleSession:
        return auth.require(request)

    return Depends(require)
