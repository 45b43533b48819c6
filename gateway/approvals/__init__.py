"""Approvals: the least-trusted voice decides.

``taint`` decides, from provenance, whether a turn has seen words that are not the owner's;
``gate`` holds that turn's owner-power actions for the owner's approval; ``store`` keeps the
requests (``state/approvals.json``); ``prompt`` words what the owner and the model read.
"""

from lucidgate.gateway.approvals.gate import Approvals
from lucidgate.gateway.approvals.store import ApprovalRequest, ApprovalStore
from lucidgate.gateway.approvals.taint import OUTSIDE_KEY, Taint, TurnTaint

__all__ = ["OUTSIDE_KEY", "ApprovalRequest", "ApprovalStore", "Approvals", "Taint", "TurnTaint"]
