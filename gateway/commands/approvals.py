"""``/approve <id>`` and ``/deny <id>``: the owner answers a held action.

Owner-only and private-only (the registry refuses a guest, and any shared chat, before the
handler runs; ``Approvals`` checks again). ``/approve`` with no id lists what is pending.
"""

from __future__ import annotations

from typing import ClassVar

from lucidgate.gateway.agent.commands import About
from lucidgate.gateway.approvals import Approvals
from lucidgate.gateway.tools.turn import TurnContext


def _pending(approvals: Approvals) -> str:
    waiting = [r for r in approvals.recent() if r.status == "pending"]
    if not waiting:
        return "No actions wait for your approval."
    lines = [f"{len(waiting)} action(s) wait for your approval:"]
    lines += [f"- {r.id}: {r.tool} in {r.session_key}" for r in waiting]
    return "\n".join(lines)


class _Answer:
    """``/approve <id>`` and ``/deny <id>``: one unit each, the same shape; without an id, what waits."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals

    async def __call__(self, ctx: TurnContext, args: str) -> str:
        if not args.strip():
            return _pending(self.approvals)
        return await self._answer(args.split()[0], ctx)

    async def _answer(self, request_id: str, ctx: TurnContext) -> str:
        raise NotImplementedError


class Approve(_Answer):
    about: ClassVar[About] = About("approve", "run a held action once", owner_only=True, private_only=True,
                                   usage="<id>")

    async def _answer(self, request_id: str, ctx: TurnContext) -> str:
        return await self.approvals.approve(request_id, ctx)


class Deny(_Answer):
    about: ClassVar[About] = About("deny", "refuse a held action", owner_only=True, private_only=True,
                                   usage="<id>")

    async def _answer(self, request_id: str, ctx: TurnContext) -> str:
        return await self.approvals.deny(request_id, ctx)
