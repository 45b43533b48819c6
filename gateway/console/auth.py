"""Who may use the console: the owner, proven once, then a session cookie.

Credentials: ``console.token`` from the config (never a channel's integration token), or
a one-time code from ``lucid console`` (``links.py``). Either opens a session: a random
id in an ``HttpOnly; SameSite=Strict`` cookie (``Secure`` over TLS), kept server-side
only as a digest with its expiry and a CSRF token. The page keeps the CSRF token in
memory (never in storage) and sends it as ``X-CSRF-Token`` on every state-changing
request, which must also carry an ``Origin`` of this very host. Sessions live in this
process: a restart asks for a new login.

Wrong logins are throttled per client address (``MAX_FAILURES_PER_MIN`` a minute), and the
correct token is checked before the throttle: whoever floods the login from anywhere slows
only their own guesses and can never lock the owner out. A code from a throttled client is
refused without being tried, so guessing codes stays slow.
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

from lucidgate.gateway.console.links import LoginLinks

COOKIE = "lucid_console"
CSRF_HEADER = "x-csrf-token"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_FAILURES_PER_MIN = 10
MAX_TRACKED_CLIENTS = 10_000  # a bound on the failure table, whoever fills it


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
        self._failures: dict[str, deque[float]] = {}

    # -- logging in ----------------------------------------------------------------------
    def _throttled(self, client: str) -> bool:
        now = self.clock()
        failures = self._failures.get(client)
        if failures is None:
            return False
        while failures and now - failures[0] > 60:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return False
        return len(failures) >= MAX_FAILURES_PER_MIN

    def _failed(self, client: str) -> None:
        if client not in self._failures and len(self._failures) >= MAX_TRACKED_CLIENTS:
            now = self.clock()
            for key in [k for k, d in self._failures.items() if not d or now - d[-1] > 60]:
                del self._failures[key]
            if len(self._failures) >= MAX_TRACKED_CLIENTS:  # still full: forget the oldest client
                del self._failures[next(iter(self._failures))]
        self._failures.setdefault(client, deque()).append(self.clock())

    async def check_credential(self, *, token: str | None, code: str | None, client: str = "") -> bool:
        """Whether the token or one-time code is valid; 429 for a throttled client's wrong one."""
        if token and self._token and secrets.compare_digest(token.encode("utf-8"), self._token.encode("utf-8")):
            return True  # never refused, however many wrong attempts anyone made
        if self._throttled(client):
            raise HTTPException(429, "too many failed logins from this client; wait a minute")
        ok = False
        if code and not (token and self._token):
            ok = await asyncio.to_thread(self.links.redeem, code)
        if not ok:
            self._failed(client)
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
