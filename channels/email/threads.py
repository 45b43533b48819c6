"""Conversations: which thread a mail belongs to, what a reply answers, whether it was answered.

A mail's thread is named by its *root*, the first Message-ID of the conversation: found
through the ids this store already knows (a reply to the bot's reply names the bot's
Message-ID, which the store maps to its thread), else the first of References, else
In-Reply-To, else the mail's own id. The session key uses a short hash of the root, so a
thread is one session whatever the subject says.

For each mail handed to the agent the store keeps what a reply needs (the address to answer,
the subject, the References chain) and, once answered, the outbox delivery id of the answer.
That makes "one answer per mail" hold across two paths and a crash: a ``message`` tool send
into the thread becomes the mail's answer and the turn's final reply is then dropped; a
reply the outbox sends again after a restart (sent, but not yet marked delivered) is
recognised by its delivery id and not sent twice.

One JSON file (``state/email-threads.json``), rewritten atomically on each change, holding
the newest ``KEEP`` mails.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

from lucidgate.config.fileio import atomic_write_bytes

logger = logging.getLogger(__name__)

__all__ = ["KEEP", "MailRecord", "ThreadStore", "thread_key"]

KEEP = 2000
MAX_REFERENCES = 20  # a References header grows with every reply: the oldest are dropped


@dataclass(slots=True)
class MailRecord:
    thread: str
    to: str
    subject: str
    references: list[str]
    answered: str | None = None  # the delivery id of the answer, once sent


def thread_key(root: str) -> str:
    """The session's thread id for a thread root (short, safe in a file name)."""
    return hashlib.sha256(root.encode()).hexdigest()[:16]


class ThreadStore:
    """Thread-safe; ``save`` blocks (call it through ``asyncio.to_thread``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.mails: OrderedDict[str, MailRecord] = OrderedDict()
        self.roots: dict[str, str] = {}  # any known Message-ID -> its thread's root
        self.latest: dict[str, str] = {}  # thread key -> the newest mail handed to the agent
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            for mail_id, rec in data.get("mails", {}).items():
                self.mails[mail_id] = MailRecord(**rec)
            self.roots = {str(k): str(v) for k, v in data.get("roots", {}).items()}
            self.latest = {str(k): str(v) for k, v in data.get("latest", {}).items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError):
            logger.warning("%s is unreadable; earlier email threads start anew", self.path)
            self.mails, self.roots, self.latest = OrderedDict(), {}, {}

    def root_of(self, message_id: str, in_reply_to: str | None, references: list[str]) -> str:
        """The thread root of a mail (see the module docstring)."""
        with self._lock:
            for known in ([in_reply_to] if in_reply_to else []) + list(reversed(references)):
                if known in self.roots:
                    return self.roots[known]
        if references:
            return references[0]
        return in_reply_to or message_id

    def note_mail(self, mail_id: str, root: str, thread: str, record: MailRecord) -> None:
        """Remember an inbound mail before it goes to the agent."""
        with self._lock:
            if mail_id in self.mails:  # a replay: keep what it already says (``answered``)
                return
            self.mails[mail_id] = record
            self.roots[mail_id] = root
            self.latest[thread] = mail_id
            while len(self.mails) > KEEP:
                old, rec = self.mails.popitem(last=False)
                self.roots.pop(old, None)
                if self.latest.get(rec.thread) == old:
                    del self.latest[rec.thread]
            if len(self.roots) > 4 * KEEP:
                live = set(self.roots.values())
                self.roots = {k: v for k, v in self.roots.items() if k in self.mails or v in live}

    def mail(self, mail_id: str | None) -> MailRecord | None:
        return self.mails.get(mail_id) if mail_id else None

    def latest_of(self, thread: str | None) -> tuple[str, MailRecord] | None:
        mail_id = self.latest.get(thread) if thread else None
        record = self.mails.get(mail_id) if mail_id else None
        return (mail_id, record) if mail_id and record else None

    def answered(self, mail_id: str, delivery_id: str, sent_id: str) -> None:
        """The mail got its answer (``sent_id``: the answer's Message-ID, now part of the thread)."""
        with self._lock:
            record = self.mails.get(mail_id)
            if record is not None:
                record.answered = delivery_id
                self.roots[sent_id] = self.roots.get(mail_id, mail_id)

    def note_sent(self, sent_id: str, root: str) -> None:
        with self._lock:
            self.roots[sent_id] = root

    def root_of_mail(self, mail_id: str) -> str:
        return self.roots.get(mail_id, mail_id)

    def save(self) -> None:
        with self._lock:
            data = {"mails": {k: asdict(v) for k, v in self.mails.items()}, "roots": self.roots,
                    "latest": self.latest}
            # Written under the lock: two saves never land in the wrong order.
            atomic_write_bytes(self.path, json.dumps(data, ensure_ascii=False).encode())
