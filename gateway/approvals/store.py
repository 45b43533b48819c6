"""Approval requests and their file, ``state/approvals.json``.

A request is bound to one exact action: the tool's name and its arguments as canonical JSON,
hashed (``digest``); the action is re-hashed before it runs, so a request whose action changed
is refused. It is bound to the chat and turn that asked (``session_key``, ``turn``), is
one-shot (``pending`` → ``running`` → ``done``, or ``denied`` / ``expired``), and expires at
``expires_at`` (wall-clock seconds, so a restart keeps the deadline). Ids come from
``secrets.token_urlsafe``: unguessable, compared in constant time.

The file is rewritten atomically on every change (requests are few and small). A request
found ``running`` at load was cut off by a crash mid-run: it is marked ``interrupted`` and
never re-run blindly. Decided requests are kept (the newest ``KEEP_DECIDED``) for the log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

Status = Literal["pending", "running", "done", "denied", "expired", "interrupted"]
KEEP_DECIDED = 200


def canonical(arguments: str | dict[str, Any] | None) -> str:
    """Arguments as one canonical JSON text: key order and spacing never change the digest."""
    if arguments is None or arguments == "":
        value: Any = {}
    elif isinstance(arguments, str):
        value = json.loads(arguments)
    else:
        value = arguments
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def action_digest(tool: str, arguments: str) -> str:
    return hashlib.sha256(f"{tool}\x00{arguments}".encode()).hexdigest()


@dataclass(slots=True)
class ApprovalRequest:
    id: str
    tool: str
    arguments: str  # canonical JSON
    digest: str
    session_key: str
    channel: str
    chat_id: str
    chat_type: str
    sender_id: str
    origin: str  # why it was held: the untrusted source
    quote: str  # the first of its words, quoted as material
    created_at: float
    expires_at: float
    thread_id: str | None = None
    turn: str | None = None  # the user line's message id (or the tool call's id)
    status: Status = "pending"
    decided_by: str | None = None
    decided_at: float | None = None  # wall-clock seconds of the answer (or of the expiry)
    outcome: str | None = None
    notified: list[str] = field(default_factory=list)  # where the owner was asked ("telegram:42")

    @classmethod
    def new(cls, *, tool: str, arguments: str, **rest: Any) -> ApprovalRequest:
        return cls(id=secrets.token_urlsafe(12), tool=tool, arguments=arguments,
                   digest=action_digest(tool, arguments), **rest)

    def intact(self) -> bool:
        """The stored action is still the one that was hashed when it was held."""
        return hmac.compare_digest(self.digest, action_digest(self.tool, self.arguments))

    def action(self) -> str:
        return f"{self.tool} {self.arguments}"


class ApprovalStore:
    """The requests in memory, mirrored to one JSON file. Blocking I/O: callers use a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._requests: dict[str, ApprovalRequest] = {}

    def load(self) -> list[ApprovalRequest]:
        """Read the file; returns the requests a crash left ``running`` (now ``interrupted``)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError):
            logger.error("%s is unreadable; no approval request from before is honoured", self.path)
            return []
        names = {f.name for f in fields(ApprovalRequest)}
        cut: list[ApprovalRequest] = []
        for raw in data.get("requests", []) if isinstance(data, dict) else []:
            try:
                request = ApprovalRequest(**{k: v for k, v in raw.items() if k in names})
            except TypeError:
                logger.warning("skipping a malformed approval request in %s", self.path)
                continue
            if request.status == "running":
                request = replace(request, status="interrupted",
                                  outcome="the gateway stopped while it ran; it was not run again")
                cut.append(request)
            self._requests[request.id] = request
        if cut:
            self.save()
        return cut

    def save(self) -> None:
        decided = sorted((r for r in self._requests.values() if r.status not in ("pending", "running")),
                         key=lambda r: r.created_at)
        for old in decided[: max(0, len(decided) - KEEP_DECIDED)]:
            self._requests.pop(old.id, None)
        body = {"v": 1, "requests": [asdict(r) for r in self._requests.values()]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(body, ensure_ascii=False, indent=1), mode=0o600)

    def add(self, request: ApprovalRequest) -> None:
        self._requests[request.id] = request
        self.save()

    def find(self, request_id: str) -> ApprovalRequest | None:
        """The request with this id, compared in constant time (no timing oracle on ids)."""
        found = None
        for known, request in self._requests.items():
            if hmac.compare_digest(known.encode(), request_id.encode()):
                found = request
        return found

    def update(self, request: ApprovalRequest, **changes: Any) -> ApprovalRequest:
        updated = replace(request, **changes)
        self._requests[request.id] = updated
        self.save()
        return updated

    def pending(self, session_key: str | None = None) -> list[ApprovalRequest]:
        return [r for r in self._requests.values()
                if r.status == "pending" and (session_key is None or r.session_key == session_key)]

    def recent(self, limit: int = 50) -> list[ApprovalRequest]:
        return sorted(self._requests.values(), key=lambda r: r.created_at, reverse=True)[:limit]
