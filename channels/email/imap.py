"""The IMAP side of the email channel: one session at a time, IDLE or polling, and a watchdog.

A session connects (TLS from the first byte, or plain on loopback), logs in, sends ``ID``
when the server advertises it (some providers refuse ``SELECT`` from clients that do not
say who they are), selects the folder and checks UIDVALIDITY against the saved state
(``channels.email.state``). Then it repeats one *round*: fetch every mail above the last
handled UID, oldest first, and wait for the next — IDLE when the server offers it (ended
and restarted every ``idleRefreshS``, below the 30 minutes servers allow), otherwise a
NOOP every ``pollIntervalS``.

Exactly-once, per mail: the raw mail is fetched with ``BODY.PEEK`` (nothing is marked yet),
handed to ``handle`` — which returns only once the inbox journal holds it, or it was
deliberately skipped — then the mailbox care runs (``afterHandling``: flag seen, move,
delete), and only then is the UID saved as handled. A crash anywhere before re-reads that
one mail, and the journal recognises it.

Liveness: a round that takes longer than ``watchdogS`` (a connection that went silent
without closing: NAT timeouts, a suspended laptop) is abandoned, and the session is opened
again; ``restarts`` counts those. Any other failure reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path

import aioimaplib

from lucidgate.channels.bus import BusClosed
from lucidgate.channels.email.settings import EmailSettings
from lucidgate.channels.email.state import ImapState, save_state
from lucidgate.config.backoff import backoff_delay

logger = logging.getLogger(__name__)

__all__ = ["ImapError", "ImapIntake", "open_session"]

Handler = Callable[[bytes, int, int], Awaitable[None]]

_UIDVALIDITY = re.compile(rb"UIDVALIDITY (\d+)")
_UIDNEXT = re.compile(rb"UIDNEXT (\d+)")
_SIZE = re.compile(rb"RFC822\.SIZE (\d+)")


class ImapError(Exception):
    """The server refused a command; ``login`` when it refused the credentials."""

    def __init__(self, what: str, response: object, *, login: bool = False) -> None:
        lines = getattr(response, "lines", None) or [b""]
        detail = bytes(lines[-1]).decode("utf-8", "replace") if lines else ""
        super().__init__(f"IMAP {what} refused: {getattr(response, 'result', '?')} {detail}".strip())
        self.login = login


def _version() -> str:
    try:
        return metadata.version("lucidgate")
    except metadata.PackageNotFoundError:
        return "dev"


def _quoted(name: str) -> str:
    return aioimaplib.quoted(name) if re.search(r'[\s"()\\{]', name) or not name else name


def _checked(what: str, response: object) -> object:
    if getattr(response, "result", None) != "OK":
        raise ImapError(what, response)
    return response


async def open_session(settings: EmailSettings) -> aioimaplib.IMAP4:
    """A logged-in client (``ID`` sent when advertised); the caller logs out."""
    kind = aioimaplib.IMAP4_SSL if settings.imap_tls else aioimaplib.IMAP4
    client = kind(host=settings.imap_host, port=settings.imap_port, timeout=settings.timeout_s)
    await client.wait_hello_from_server()
    response = await client.login(settings.imap_user, settings.imap_password)
    if response.result != "OK":
        raise ImapError("login", response, login=True)
    if not any(b"CAPABILITY" in bytes(line) for line in response.lines):
        await client.protocol.capability()  # the login answer did not list them (ID, IDLE, MOVE...)
    if client.has_capability("ID"):
        await client.id(name="lucidgate", version=_version())
    return client


class ImapIntake:
    """Runs sessions until cancelled; ``handle(raw, uid, uidvalidity)`` journals one mail."""

    def __init__(self, settings: EmailSettings, state: ImapState, state_path: Path, handle: Handler) -> None:
        self.settings = settings
        self.state = state
        self._state_path = state_path
        self._handle = handle
        self.ready = asyncio.Event()  # the folder is selected and caught up (tests, status)
        self.idling: bool | None = None  # IDLE in use (None: not known yet)
        self.restarts = 0  # sessions the watchdog abandoned
        self.rounds = 0

    async def run(self) -> None:
        failures = 0
        while True:
            rounds = self.rounds
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except ImapError as exc:
                failures += 1
                level = logging.ERROR if exc.login else logging.WARNING
                logger.log(level, "email: %s%s", exc,
                           " (check channels.email.username/password)" if exc.login else "; reconnecting")
            except (aioimaplib.AioImapException, OSError, TimeoutError, ValueError) as exc:
                failures += 1
                logger.warning("email: the IMAP session to %s ended (%s: %s); reconnecting",
                               self.settings.imap_host, type(exc).__name__, exc)
            except BusClosed:
                logger.info("email: the gateway is shutting down; the mail being read stays unhandled "
                            "and is read at the next start")
            except Exception:  # a bug must not end intake for good ("starts, then never answers")
                failures += 1
                logger.exception("email: the IMAP session failed; reconnecting")
            self.ready.clear()
            if self.rounds > rounds:  # the session worked for a while: a fresh failure, a short wait
                failures = 1
            await asyncio.sleep(backoff_delay(max(failures, 1), self.settings.retry_base_s,
                                              self.settings.retry_max_s))

    async def _session(self) -> None:
        client = await open_session(self.settings)
        dead = False
        try:
            await self._select(client)
            while True:
                watch = asyncio.timeout(self.settings.watchdog_s)
                try:
                    async with watch:
                        await self._drain(client)
                        self.ready.set()
                        waited = await self._wait(client)
                except TimeoutError:
                    if watch.expired():
                        dead = True
                        self.restarts += 1
                        logger.warning("email: an IMAP round took over %.0f s (watchdogS); the "
                                       "connection looks dead, opening a new one", self.settings.watchdog_s)
                    raise
                self.rounds += 1
                if not waited:
                    await asyncio.sleep(self.settings.poll_interval_s)
        finally:
            await _close(client, polite=not dead)

    async def _select(self, client: aioimaplib.IMAP4) -> None:
        s = self.settings
        response = _checked(f"SELECT {s.folder}", await client.select(_quoted(s.folder)))
        text = b"\n".join(bytes(line) for line in getattr(response, "lines", []))
        validity = int(m.group(1)) if (m := _UIDVALIDITY.search(text)) else 0
        uidnext = int(m.group(1)) if (m := _UIDNEXT.search(text)) else None
        if s.after_handling == "move":
            await client.create(_quoted(s.move_to))  # "already exists" is fine
        if self.state.uidvalidity == validity:
            return
        start = (uidnext - 1) if uidnext else await self._highest_uid(client)
        if self.state.uidvalidity is None:
            logger.info("email: first start on %s/%s; mail already there is left alone (answering "
                        "starts with the next one)", s.imap_host, s.folder)
        else:
            logger.warning("email: %s/%s has a new UIDVALIDITY (%s, was %s): the folder was recreated; "
                           "answering starts with its next mail", s.imap_host, s.folder, validity,
                           self.state.uidvalidity)
        self.state.uidvalidity, self.state.last_uid = validity, max(0, start)
        await asyncio.to_thread(save_state, self._state_path, self.state)

    async def _highest_uid(self, client: aioimaplib.IMAP4) -> int:
        response = _checked("SEARCH", await client.uid_search("ALL", charset=None))
        uids = [int(x) for x in bytes(response.lines[0]).split() if x.isdigit()]  # type: ignore[attr-defined]
        return max(uids, default=0)

    async def _drain(self, client: aioimaplib.IMAP4) -> None:
        """Hand every mail above the last handled UID to ``handle``, oldest first."""
        response = _checked("SEARCH", await client.uid_search("UID", f"{self.state.last_uid + 1}:*", charset=None))
        first = bytes(response.lines[0]) if response.lines else b""  # type: ignore[attr-defined]
        uids = sorted(u for x in first.split() if x.isdigit() and (u := int(x)) > self.state.last_uid)
        for uid in uids:
            raw = await self._fetch(client, uid)
            if raw is not None:
                await self._handle(raw, uid, self.state.uidvalidity or 0)
                await self._care(client, uid)
            self.state.last_uid = uid
            await asyncio.to_thread(save_state, self._state_path, self.state)

    async def _fetch(self, client: aioimaplib.IMAP4, uid: int) -> bytes | None:
        """The raw mail, or None when it is gone or over ``maxMailBytes`` (logged)."""
        sized = _checked("FETCH", await client.uid("fetch", str(uid), "(RFC822.SIZE)"))
        text = b" ".join(bytes(line) for line in getattr(sized, "lines", []))
        size = int(m.group(1)) if (m := _SIZE.search(text)) else None
        if size is None:
            return None  # expunged meanwhile
        if size > self.settings.max_mail_bytes:
            logger.warning("email: mail UID %d is %.1f MB, over maxMailBytes; not read", uid, size / 1e6)
            return None
        response = _checked("FETCH", await client.uid("fetch", str(uid), "(BODY.PEEK[])"))
        for line in getattr(response, "lines", []):
            if isinstance(line, bytearray):
                return bytes(line)
        return None

    async def _care(self, client: aioimaplib.IMAP4, uid: int) -> None:
        """``afterHandling`` for one handled mail; a failure is logged, never retried."""
        how, ref = self.settings.after_handling, str(uid)
        try:
            if how == "seen":
                _checked("STORE", await client.uid("store", ref, "+FLAGS.SILENT", r"(\Seen)"))
            elif how == "move" and client.has_capability("MOVE"):
                _checked("MOVE", await client.uid("move", ref, _quoted(self.settings.move_to)))
            elif how in ("move", "delete"):
                if how == "move":
                    _checked("COPY", await client.uid("copy", ref, _quoted(self.settings.move_to)))
                _checked("STORE", await client.uid("store", ref, "+FLAGS.SILENT", r"(\Deleted)"))
                if client.has_capability("UIDPLUS"):
                    await client.uid("expunge", ref)
                else:
                    await client.expunge()
        except (ImapError, aioimaplib.Abort) as exc:
            logger.warning("email: could not %s mail UID %d: %s", how, uid, exc)

    async def _wait(self, client: aioimaplib.IMAP4) -> bool:
        """Wait for news with IDLE; False when the server has no IDLE (the caller polls)."""
        self.idling = self.settings.idle and client.has_capability("IDLE")
        if not self.idling:
            _checked("NOOP", await client.noop())
            return False
        s = self.settings
        # Ended before the watchdog would call the round stuck, whatever the two are set to.
        refresh = max(1.0, min(s.idle_refresh_s, s.watchdog_s * 0.9 - s.timeout_s))
        idle = await client.idle_start(timeout=refresh)
        try:
            await client.wait_server_push(timeout=refresh + self.settings.timeout_s)
        finally:
            if client.has_pending_idle():
                client.idle_done()
            await asyncio.wait_for(idle, self.settings.timeout_s)
        return True


async def _close(client: aioimaplib.IMAP4, *, polite: bool = True) -> None:
    """Log out (``polite``: a connection that still answers), then drop the connection."""
    if polite:
        try:
            await asyncio.wait_for(client.logout(), 5)
        except (aioimaplib.AioImapException, OSError, TimeoutError, AttributeError):
            pass
    transport = getattr(client.protocol, "transport", None)
    if transport is not None:
        transport.close()
