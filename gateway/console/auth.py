"""Who may use the console: the owner, proven once, then a session cookie.

Credentials: ``console.token`` from the config (never a channel's integration token), or
a one-time code from ``lucid console`` (``links.py``). Either opens a session: a random
id in an ``HttpOnly; SameSite=Strict`` cookie (``Secure`` over TLS), kept server-side
only as a digest with its expiry and a CSRF token. The page keeps the CSRF token in
memory (never in storage) and sends it as ``X-CSRF-Token`` on every state-changing
request, which must also carry an ``Origin`` of this very host. Sessions live in this
process: a restart asks for a new login.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from gateway.console.links import LoginLinks

COOKIE = "lucid_console"
CSRF_HEADER = "x-csrf-token"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_FAILURES_PER_MIN = 10


@dataclass(slots=True)
class ConsoleSession:
    csrf: str
    expires_at: float


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class ConsoleAuth:
    def __init__(self, *, token: str, links: LoginLinks, ttl_s: float) -> None:
        self._token = token
        self.links = links
        self.ttl_s = ttl_s
        self.clock: Callable[[], float] = time.monotonic
        self._sessions: dict[str, ConsoleSession] = {}
        self._failures: deque[float] = deque()

    # -- logging in ----------------------------------------------------------------------
    def _throttled(self) -> bool:
        now = self.clock()
        while self._failures and now - self._failures[0] > 60:
            self._failures.popleft()
        return len(self._failures) >= MAX_FAILURES_PER_MIN

    async def check_credential(self, *, token: str | None, code: str | None) -> bool:
        if self._throttled():
            raise HTTPException(429, "too many failed logins; wait a minute")
        ok = False
        if token and self._token:
            ok = secrets.compare_digest(token.encode("utf-8"), self._token.encode("utf-8"))
        elif code:
            ok = await asyncio.to_thread(self.links.redeem, code)
        if not ok:
            self._failures.append(self.clock())
        return ok

    def open_session(self) -> tuple[str, ConsoleSession]:
        sid = secrets.token_urlsafe(32)
        session = ConsoleSession(csrf=secrets.token_urlsafe(24), expires_at=self.clock() + self.ttl_s)
        self._prune()
        self._sessions[_digest(sid)] = session
        return sid, session

    def close_session(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(_digest(sid), None)

    def _prune(self) -> None:
        now = self.clock()
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]

    # -- every request -----------------------------------------------------------------------
    def session_of(self, request: Request) -> ConsoleSession | None:
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        session = self._sessions.get(_digest(sid))
        if session is None:
            return None
        if session.expires_at <= self.clock():
            self._sessions.pop(_digest(sid), None)
            return None
        return session

    def require(self, request: Request) -> ConsoleSession:
        """The caller's session, checked for Origin and CSRF when the request changes state."""
        session = self.session_of(request)
        if session is None:
            raise HTTPException(401, "log in to the console first", headers={"WWW-Authenticate": "Cookie"})
        if request.method in UNSAFE:
            check_origin(request)
            sent = request.headers.get(CSRF_HEADER, "")
            if not secrets.compare_digest(sent.encode("utf-8"), session.csrf.encode("utf-8")):
                raise HTTPException(403, "missing or wrong X-CSRF-Token; reload the console")
        return session


def check_origin(request: Request) -> None:
    """A state-changing request must come from a page served by this very host."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if not origin:
        raise HTTPException(403, "missing Origin header")
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
        raise HTTPException(403, "cross-origin request refused")


def cookie_secure(request: Request) -> bool:
    return request.url.scheme == "https"
