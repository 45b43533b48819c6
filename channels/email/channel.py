"""The email channel: a mailbox read over IMAP (``imap``), answered over SMTP (``smtp``).

Intake, per mail (``handle_mail``), in this order:

1. loop guards (``guards``): the bot's own address, auto-replies, bounces, bulk and list mail
   are skipped — logged, marked handled, never answered;
2. the thread (``threads``): the session key is ``email:<sender>:<thread>``, so one
   conversation is one session whatever its subject;
3. the one access gate: ``owners`` and ``allowFrom`` are addresses (``@example.com``: a whole
   domain), matched case-insensitively. An owner's address makes the sender the owner only
   when the receiving server authenticated it (``authres``); otherwise the mail is a guest's,
   in a session of its own (a forged mail never lands in the owner's conversation). Strangers
   get no mail back unless ``refusal`` is set (no backscatter); the gate logs them;
4. attachments saved under ``media/email/<sender>/<thread>/`` (size-capped, names sanitised)
   and named to the model;
5. published on the bus, which returns once the inbox journal holds the mail — only then
   does ``imap`` mark it handled on the server.

Outbound (``send``): every reply answers one mail of its thread — the one it names
(``reply_to``), else the thread's newest. One answer per mail: the first mail sent into a
thread while its newest mail is unanswered (a ``message`` tool send during the turn) is that
mail's answer, and the turn's final reply is then not sent; a reply resent by the outbox
after a restart that already went out (same delivery id) is not sent again. Typing and
progress have no meaning in mail and are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from lucidgate.channels._ratelimit import DeliveryFailed
from lucidgate.channels._stopping import cancel_tasks, flush_replies
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.email.authres import authenticated
from lucidgate.channels.email.compose import build_reply, reply_subject, sent_id
from lucidgate.channels.email.guards import why_not_answer
from lucidgate.channels.email.imap import ImapIntake
from lucidgate.channels.email.parse import ParsedMail, parse_mail, safe_name
from lucidgate.channels.email.settings import EmailSettings
from lucidgate.channels.email.smtp import send_mail
from lucidgate.channels.email.state import load_state, state_path
from lucidgate.channels.email.threads import MailRecord, ThreadStore, thread_key
from lucidgate.channels.gate import AccessGate, AccessRequest, Roster
from lucidgate.channels.messages import InboundMessage, OutboundError, OutboundMessage, OutboundText, Target
from lucidgate.channels.outfiles import FileRoots, OutFile, ready, with_problems
from lucidgate.channels.pairing import PairingStore
from lucidgate.config.channel_schema import EmailConfig
from lucidgate.config.fileio import atomic_write_bytes

logger = logging.getLogger(__name__)

NAME = "email"
UNVERIFIED = "\x00unverified"


def roster_of(section: EmailConfig) -> Roster:
    """Owners and ``allowFrom`` as the gate matches them: lowercased addresses; a domain entry
    (``@example.com``, or ``example.com``) becomes the gate's "username" form, which the
    channel fills with the sender's domain."""
    def entry(value: str) -> str:
        value = value.strip().lower()
        return value if "@" in value else f"@{value}"
    return Roster([entry(e) for e in section.allow_from if e.strip()],
                  [o.strip().lower() for o in section.owners if o.strip()])


def _folder_of(address: str) -> str:
    """The sender's media folder: the address itself (file tools let a guest read their own
    chat's folder, ``media/email/<address>``), with anything unusual in a name replaced."""
    return re.sub(r"[^A-Za-z0-9@._+-]", "_", address).lstrip(".") or "unknown"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{max(1, round(n / 1024))} KB"


def threads_path(workspace: Path) -> Path:
    return Path(workspace) / "state" / "email-threads.json"


class EmailChannel:
    name = NAME

    def __init__(self, settings: EmailSettings, bus: MessageBus, *, workspace: Path,
                 gate: AccessGate | None = None, pairing: PairingStore | None = None) -> None:
        self.settings = settings
        self.bus = bus
        self.workspace = Path(workspace)
        section = settings.access
        self.gate = AccessGate.of_channel(NAME, section, bus, gate=gate, pairing=pairing,
                                          workspace=self.workspace, roster=roster_of(section))
        account = f"{settings.imap_user}@{settings.imap_host}:{settings.imap_port}/{settings.folder}"
        self.state = load_state(state_path(self.workspace), account)
        self.threads = ThreadStore(threads_path(self.workspace))
        self.intake = ImapIntake(settings, self.state, state_path(self.workspace), self.handle_raw)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = False
        self.skipped = 0  # mails the loop guards kept from the agent (tests, status)

    # -- lifecycle -----------------------------------------------------------------------
    def describe(self) -> str:
        """The registry's one-line summary (never a credential)."""
        s = self.settings
        how = "IDLE" if s.idle else f"polling every {s.poll_interval_s:g} s"
        trust = f"owners trusted on {s.authserv_id}'s checks" if s.authserv_id else \
            "no authservId: owners' mail counts as a guest's"
        return (f"{s.address} via {s.imap_host} ({how}) and {s.smtp_host}:{s.smtp_port} ({s.smtp_security}), "
                f"{len(s.access.allow_from)} allowed, {trust}")

    def is_owner(self, sender_id: str) -> bool:
        return self.gate.is_owner(sender_id.strip().lower())

    async def start(self) -> None:
        self._stopping = False
        self.bus.subscribe(NAME, self.send)
        self._spawn("imap", self.intake.run())

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        await cancel_tasks(self._tasks)
        await flush_replies(self.bus, logger, "email replies still queued at shutdown stay in the outbox")
        self.bus.unsubscribe(NAME)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks[name] = asyncio.create_task(coro, name=f"email-{name}")

    # -- inbound -------------------------------------------------------------------------
    async def handle_raw(self, raw: bytes, uid: int, uidvalidity: int) -> None:
        """One fetched mail (``imap``'s handler): returns once it is journalled or skipped."""
        fallback = f"uid{uidvalidity}.{uid}@{safe_name(self.settings.imap_host)}"
        parsed = await asyncio.to_thread(parse_mail, raw, fallback)
        await self.handle_mail(parsed)

    async def handle_mail(self, mail: ParsedMail) -> None:
        s = self.settings
        why = why_not_answer(mail.message, mail.sender, own=s.address, answer_lists=s.answer_lists)
        if why is not None:
            self.skipped += 1
            logger.info("email: not answering %s from %s: %s", mail.message_id, mail.sender or "?", why)
            return
        trusted = authenticated(mail.message, mail.from_domain, s.authserv_id)
        claims_owner = self.gate.is_owner(mail.sender)
        root = self.threads.root_of(mail.message_id, mail.in_reply_to, mail.references)
        thread = thread_key(root if trusted or not claims_owner else root + UNVERIFIED)
        chain = [root] if root != mail.message_id and root not in mail.references else []
        record = MailRecord(thread, mail.sender, mail.subject, [*chain, *mail.references, mail.message_id][-20:])
        self.threads.note_mail(mail.message_id, root, thread, record)
        await asyncio.to_thread(self.threads.save)
        knock = AccessRequest(NAME, mail.sender, mail.sender, mail.from_domain, "private")
        decision = await self.gate.admit(knock, reply=Target(NAME, mail.sender, thread, mail.message_id))
        if not decision.allowed:
            return  # the gate logged it; no mail goes back unless ``refusal`` is set
        role = decision.role
        if claims_owner and not trusted:
            role = "guest"
            logger.warning("email: %s claims an owner's address but %s", mail.message_id,
                           f"no Authentication-Results from {s.authserv_id} passes it" if s.authserv_id
                           else "channels.email.authservId is not set; it is treated as a guest")
        notes, media = await asyncio.to_thread(self._save_attachments, mail, thread)
        lines = [f"Subject: {mail.subject}"] if mail.subject else []
        text = "\n".join([*lines, "", mail.text, *notes] if mail.text else [*lines, *notes]).strip()
        if not text:
            text = "(an empty mail)"
        inbound = InboundMessage(channel=NAME, chat_id=mail.sender, sender_id=mail.sender, text=text,
                                 chat_type="private", thread_id=thread, media=tuple(media),
                                 message_id=mail.message_id, sender_name=mail.sender_name or mail.sender,
                                 role=role, account=self.settings.address or None)
        if not await self.bus.publish_inbound(inbound):
            logger.info("email: %s was already handed to the assistant; not again", mail.message_id)

    def _save_attachments(self, mail: ParsedMail, thread: str) -> tuple[list[str], list[str]]:
        """Save each attachment (blocking: run in a thread); (notes for the model, paths)."""
        notes: list[str] = []
        paths: list[str] = []
        cap = self.settings.max_attachment_bytes
        folder = Path("media", NAME, _folder_of(mail.sender), thread)
        prefix = thread_key(mail.message_id)[:6]
        for n, item in enumerate(mail.attachments, 1):
            size = _size(len(item.data))
            if len(item.data) > cap:
                notes.append(f"[attachment not saved: {item.name} ({item.content_type}, {size}) is over the "
                             f"{_size(cap)} limit (maxAttachmentBytes)]")
                continue
            rel = folder / f"{prefix}-{n}-{safe_name(item.name)}"
            try:
                atomic_write_bytes(self.workspace / rel, item.data, durable=False)
            except OSError as exc:
                logger.warning("email: could not save attachment %s of %s: %s", item.name, mail.message_id, exc)
                notes.append(f"[attachment could not be saved: {item.name}]")
                continue
            notes.append(f"[attachment: {rel.as_posix()} ({item.name}, {item.content_type}, {size})]")
            paths.append(rel.as_posix())
        return notes, paths

    # -- outbound ------------------------------------------------------------------------
    async def send(self, msg: OutboundMessage) -> None:
        if not isinstance(msg, OutboundText | OutboundError):
            return  # typing and progress mean nothing in mail
        target = msg.target
        delivery = msg.delivery_id or uuid.uuid4().hex
        found = self._answers(target)
        mail_id, record = found if found else (None, None)
        if record is not None:
            if record.answered == delivery:
                logger.info("email: the reply to %s already went out before a restart; not again", mail_id)
                return
            final = isinstance(msg, OutboundError) or msg.in_reply_to is not None
            if record.answered and final and target.reply_to == mail_id:
                logger.info("email: %s was answered in the turn (the message tool); its final reply is "
                            "not mailed as well", mail_id)
                return
        to = record.to if record else target.chat_id
        if "@" not in to:
            raise DeliveryFailed(f"{to!r} is not an email address", permanent=True)
        files, problems = await self._files(msg)
        body = with_problems(msg.text, problems)
        message_id = sent_id(delivery, self.settings.domain)
        mime = build_reply(sender=self.settings.address, from_name=self.settings.from_name, to=to,
                           subject=reply_subject(record.subject) if record else
                           f"Message from {self.settings.from_name}",
                           body=body, plain=isinstance(msg, OutboundError) or msg.plain,
                           message_id=message_id, in_reply_to=mail_id,
                           references=record.references if record else [], files=files)
        await send_mail(self.settings, mime, to)
        if mail_id is not None and record is not None:
            if record.answered is None:
                self.threads.answered(mail_id, delivery, message_id)
            else:
                self.threads.note_sent(message_id, self.threads.root_of_mail(mail_id))
            await asyncio.to_thread(self.threads.save)

    def _answers(self, target: Target) -> tuple[str, MailRecord] | None:
        """The mail a reply to ``target`` answers: the one named, else the thread's newest."""
        record = self.threads.mail(target.reply_to)
        if target.reply_to and record is not None:
            return target.reply_to, record
        return self.threads.latest_of(target.thread_id)

    async def _files(self, msg: OutboundText | OutboundError) -> tuple[list[tuple[OutFile, bytes]], list[str]]:
        names = msg.files if isinstance(msg, OutboundText) else ()
        if not names:
            return [], []
        agent = msg.agent if isinstance(msg, OutboundText) else ""

        def load() -> tuple[list[tuple[OutFile, bytes]], list[str]]:
            sendable, problems = ready(FileRoots(self.workspace, self.bus.agent_workspaces), names, agent)
            out = []
            for item in sendable:
                try:
                    out.append((item, item.path.read_bytes()))
                except OSError as exc:
                    problems.append(f"{item.rel} could not be read ({exc.strerror})")
            return out, problems

        return await asyncio.to_thread(load)
