"""Held actions in the console: what waits for the owner (and what was decided), and the
owner's answer — the same one-shot, bound, expiring requests as ``/approve`` and ``/deny``.

Behind the console's owner login (unsafe methods Origin/CSRF-checked); the decision is
logged as the console's. Per agent (``?agent=<id>``): each agent holds its own actions; one
agent's request id is unknown to another's.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, Path as PathParam
from pydantic import BaseModel

from lucidgate.gateway.approvals import ApprovalRequest, Approvals
from lucidgate.gateway.console.auth import ConsoleAuth
from lucidgate.gateway.console.context import REFUSALS, TAG, PerAgent, owner_dependency
from lucidgate.gateway.tools.turn import TurnContext


class ApprovalItem(BaseModel):
    id: str
    tool: str
    arguments: str
    session_key: str
    chat_type: str
    origin: str
    quote: str
    status: str
    created_at: float
    expires_at: float
    decided_by: str | None
    decided_at: float | None
    outcome: str | None


class ApprovalList(BaseModel):
    approvals: list[ApprovalItem]


class Decision(BaseModel):
    message: str


def _item(r: ApprovalRequest) -> ApprovalItem:
    return ApprovalItem(id=r.id, tool=r.tool, arguments=r.arguments, session_key=r.session_key,
                        chat_type=r.chat_type, origin=r.origin, quote=r.quote, status=r.status,
                        created_at=r.created_at, expires_at=r.expires_at, decided_by=r.decided_by,
                        decided_at=r.decided_at, outcome=r.outcome)


def router(auth: ConsoleAuth, *, approvals: Approvals | None = None, workspace: Path | None = None,
           agents: PerAgent[tuple[Approvals, Path]] | None = None) -> APIRouter:
    """Over each agent's (approvals, workspace), or one agent's ``approvals`` and ``workspace``."""
    if agents is None:
        assert approvals is not None and workspace is not None, "one agent's approvals and workspace, or agents"
        agents = PerAgent.one((approvals, workspace))
    api = APIRouter(prefix="/api/console", tags=[TAG], dependencies=[owner_dependency(auth)], responses=REFUSALS)
    agent = agents.dependency()

    @api.get("/approvals", response_model=ApprovalList, summary="Held actions, newest first")
    async def listing(held: tuple[Approvals, Path] = agent) -> ApprovalList:
        return ApprovalList(approvals=[_item(r) for r in held[0].recent()])

    async def decide(held: tuple[Approvals, Path], request_id: str, approve: bool) -> Decision:
        approvals, workspace = held
        request = approvals.find(request_id)
        if request is None or request.status != "pending":
            raise HTTPException(404, "no pending approval request has that id")
        # The console is the owner's own credential: its answers count as the owner's, privately.
        owner = TurnContext(session_key="console", channel="console", chat_id="console", sender_id="console",
                            role="owner", chat_type="private", workspace=workspace)
        answer = approvals.approve if approve else approvals.deny
        return Decision(message=await answer(request_id, owner))

    @api.post("/approvals/{request_id}/approve", response_model=Decision, summary="Run a held action once")
    async def approve(request_id: str = PathParam(max_length=64), held: tuple[Approvals, Path] = agent) -> Decision:
        return await decide(held, request_id, True)

    @api.post("/approvals/{request_id}/deny", response_model=Decision, summary="Refuse a held action")
    async def deny(request_id: str = PathParam(max_length=64), held: tuple[Approvals, Path] = agent) -> Decision:
        return await decide(held, request_id, False)

    return api
