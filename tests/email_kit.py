"""A real mail server for the email tests: Debian's Dovecot (IMAP) and aiosmtpd (SMTP) on loopback.

``Dovecot`` writes a closed configuration into a throwaway folder — IMAP only, on 127.0.0.1
at a free port, no TLS (loopback), plaintext login allowed, users in a passwd-file, maildirs
in the folder — and runs ``/usr/sbin/dovecot -F`` with it. Unprivileged it runs entirely as
the current user. As root (CI) Dovecot refuses to run its login and mail processes as root,
so they run as the package's own ``dovenull``/``dovecot`` users, and the folder is made in
``/tmp`` and handed to ``dovecot`` (pytest's root-only temp folders are closed to it).

Without Dovecot the tests skip with one line (``tests.real_tools.need_tool``), and fail under
``LUCID_REQUIRE_REAL=1``. Each test module starts one server (``dovecot`` fixture) and each
test makes its own users, so tests never see each other's mail.

The people on the other side use nothing of the channel: ``Mailbox`` is the standard
library's ``imaplib`` (mail arrives by IMAP APPEND, as a delivery agent would file it) and
``SmtpSink`` is aiosmtpd, a real SMTP server with LOGIN/PLAIN auth, collecting what the
channel sends (and able to refuse the next sends with a 4xx, for the outbox's retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import grp
import imaplib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from tests.matrix_kit import _die_with_parent, _free_port
from tests.real_tools import need_tool

DOVECOT = "/usr/sbin/dovecot"
PASSWORD = "pw-not-a-secret"
DOMAIN = "lucid.test"
AUTHSERV = "mx.lucid.test"
POOL = 40  # accounts per server (one module's tests)


def _config(folder: Path, port: int) -> str:
    if os.geteuid() == 0:
        internal, login = "dovecot", "dovenull"
    else:
        internal = login = pwd.getpwuid(os.getuid()).pw_name
    mail = pwd.getpwnam(internal)
    return f"""
base_dir = {folder}/run
state_dir = {folder}/state
log_path = {folder}/dovecot.log
instance_name = lucid-test-{port}
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = {internal}
default_internal_group = {grp.getgrgid(mail.pw_gid).gr_name}
default_login_user = {login}
first_valid_uid = {mail.pw_uid}
last_valid_uid = {mail.pw_uid}
mail_location = maildir:~/Maildir
# IDLE learns of new mail through inotify, and falls back to this check when the machine has
# run out of inotify instances (a shared CI box): 1 s instead of 30 keeps the tests prompt.
mailbox_idle_check_interval = 1 secs
imap_id_log = *
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {folder}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {folder}/passwd
  default_fields = uid={mail.pw_uid} gid={mail.pw_gid} home={folder}/home/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"""


class Dovecot:
    """One Dovecot; ``port`` is its IMAP listener on 127.0.0.1."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.folder = Path(tempfile.mkdtemp(prefix="lucid-dovecot-"))
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # Every account exists from the start: Dovecot re-reads a changed passwd-file only when
        # its mtime moves, which two additions within one second would not do.
        self._free = [f"box{n}-{uuid.uuid4().hex[:6]}@{DOMAIN}" for n in range(POOL)]
        (self.folder / "passwd").write_text("".join(f"{a}:{{PLAIN}}{PASSWORD}::::::\n" for a in self._free))

    def start(self, timeout: float = 60.0) -> Dovecot:
        conf = self.folder / "dovecot.conf"
        conf.write_text(_config(self.folder, self.port))
        if os.geteuid() == 0:
            mail = pwd.getpwnam("dovecot")
            for path in (self.folder, conf, self.folder / "passwd"):
                os.chown(path, mail.pw_uid, mail.pw_gid)
        self.proc = subprocess.Popen([self.binary, "-F", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dovecot exited: {self.log()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1) as sock:
                if sock.recv(64).startswith(b"* OK"):
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"dovecot did not come up in time: {self.log()[-2000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        path = self.folder / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def add_user(self) -> str:
        """An account no test has used yet; returns its address (the login name)."""
        if not self._free:
            raise RuntimeError(f"all {POOL} test mailboxes are used: raise email_kit.POOL")
        return self._free.pop()

    def mailbox(self, address: str) -> Mailbox:
        return Mailbox(self.port, address)


@dataclass
class Mailbox:
    """One account, through the standard library's imaplib (blocking: methods run in threads)."""

    port: int
    address: str

    def _session(self) -> imaplib.IMAP4:
        conn = imaplib.IMAP4("127.0.0.1", self.port, timeout=30)
        conn.login(self.address, PASSWORD)
        return conn

    def _deliver(self, raw: bytes, folder: str) -> None:
        conn = self._session()
        try:
            status, data = conn.append(folder, None, None, raw)
            assert status == "OK", data
        finally:
            conn.logout()

    async def deliver(self, msg: EmailMessage | bytes, folder: str = "INBOX") -> None:
        """File a mail into the mailbox, as a delivery agent does (IMAP APPEND)."""
        raw = msg if isinstance(msg, bytes) else msg.as_bytes(policy=email.policy.SMTP)
        await asyncio.to_thread(self._deliver, raw, folder)

    def _listing(self, folder: str) -> list[tuple[int, str, str]]:
        conn = self._session()
        try:
            status, _ = conn.select(folder)
            if status != "OK":
                return []
            status, data = conn.uid("FETCH", "1:*", "(UID FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
            found = []
            for item in data:
                if isinstance(item, tuple):
                    head = item[0].decode()
                    uid = int(head.split("UID ")[1].split()[0])
                    flags = head.split("FLAGS (")[1].split(")")[0]
                    found.append((uid, flags, item[1].decode().strip()))
            return found
        finally:
            conn.logout()

    async def listing(self, folder: str = "INBOX") -> list[tuple[int, str, str]]:
        """(uid, flags, Message-ID header line) of each mail in ``folder``."""
        return await asyncio.to_thread(self._listing, folder)


def mail(sender: str, to: str, subject: str, body: str, *, message_id: str | None = None,
         in_reply_to: str | None = None, references: list[str] | None = None,
         headers: dict[str, str] | None = None, html: str | None = None,
         attachments: list[tuple[str, bytes, str]] = ()) -> EmailMessage:
    """A mail as a person's client would write it (``message_id`` without brackets)."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate()
    msg["Message-ID"] = f"<{message_id or uuid.uuid4().hex + '@' + DOMAIN}>"
    if in_reply_to:
        msg["In-Reply-To"] = f"<{in_reply_to}>"
    if references:
        msg["References"] = " ".join(f"<{r}>" for r in references)
    for key, value in (headers or {}).items():
        msg[key] = value
    if html is not None and not body:
        msg.set_content(html, subtype="html")
    else:
        msg.set_content(body)
        if html is not None:
            msg.add_alternative(html, subtype="html")
    for name, data, kind in attachments:
        maintype, _, subtype = kind.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return msg


def passed(sender: str) -> str:
    """The Authentication-Results header the receiving server adds to an authenticated mail."""
    domain = sender.rpartition("@")[2].strip(">")
    return f"{AUTHSERV}; dkim=pass header.d={domain} header.s=mail; spf=pass smtp.mailfrom={sender}"


@dataclass
class SmtpSink:
    """aiosmtpd on loopback, in the test's event loop; ``received`` holds each accepted mail."""

    user: str
    password: str = PASSWORD
    received: list[EmailMessage] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)
    refuse_next: int = 0  # answer the next N DATA commands with 451 (a transient refusal)
    refused: int = 0
    port: int = 0
    _server: Any = None

    async def __aenter__(self) -> SmtpSink:
        from aiosmtpd.smtp import SMTP, AuthResult

        def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            ok = data.login.decode() == self.user and data.password.decode() == self.password
            return AuthResult(success=ok, handled=False)

        def protocol() -> SMTP:
            with warnings.catch_warnings():  # "AUTH without TLS": on loopback, on purpose
                warnings.simplefilter("ignore", UserWarning)
                return SMTP(self, hostname=DOMAIN, authenticator=authenticate, auth_require_tls=False,
                            auth_required=True)

        self._server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse_next > 0:
            self.refuse_next -= 1
            self.refused += 1
            return "451 4.3.0 try again later"
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.received.append(parsed)
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 2.0.0 OK"

    def to(self, address: str) -> list[EmailMessage]:
        return [m for m, r in zip(self.received, self.recipients, strict=True) if address in r]


class FreezingProxy:
    """A loopback TCP relay to ``port``; ``freeze()`` makes the connections open now go silent
    (bytes are swallowed, nothing closes) — a NAT that forgot the connection — while new
    connections relay normally."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.port = 0
        self.connections = 0
        self._frozen: set[int] = set()
        self._server: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FreezingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def freeze(self) -> None:
        self._frozen.update(range(1, self.connections + 1))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                if number not in self._frozen:
                    dst.write(data)
                    await dst.drain()

        for task in (asyncio.create_task(pipe(reader, up_writer)), asyncio.create_task(pipe(up_reader, writer))):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def require_dovecot() -> str:
    return need_tool("dovecot", DOVECOT)


@pytest.fixture(scope="module")
def dovecot() -> Iterator[Dovecot]:
    server = Dovecot(require_dovecot()).start()
    try:
        yield server
    finally:
        server.stop()


def body_of(msg: EmailMessage) -> str:
    part = msg.get_body(preferencelist=("plain",))
    assert part is not None
    return str(part.get_content())
