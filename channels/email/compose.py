"""A reply as a MIME message: plain text, threaded, marked as automatic.

* Subject: the mail's subject with one ``Re:`` (never ``Re: Re:``); a mail without a thread
  to answer (a ``message`` tool send to an address) gets ``Message from <name>``.
* ``In-Reply-To`` names the mail answered and ``References`` carries the chain (newest
  ``MAX_REFERENCES``), so every mail client shows one conversation.
* ``Message-ID`` is made from the outbox delivery id: every attempt at sending one reply
  carries the same id, so a receiver that sees a retry twice can tell.
* ``Auto-Submitted: auto-replied`` (RFC 3834): other automatic responders do not answer it.
* The body is the answer's markdown rendered as readable plain text (emphasis marks and
  link syntax go, lists and code stay readable); fixed texts (``plain``) go as written.
  Workspace files named by the answer are attached.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Sequence
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate

from lucidgate.channels._markdown import to_plain
from lucidgate.channels.email.threads import MAX_REFERENCES
from lucidgate.channels.outfiles import OutFile

__all__ = ["build_reply", "reply_subject", "sent_id"]

_RE = re.compile(r"^\s*((re|aw|sv|antw)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)


def reply_subject(subject: str) -> str:
    """``Re: <subject>`` with the earlier reply prefixes folded into one."""
    bare = _RE.sub("", subject).strip()
    return f"Re: {bare}" if bare else "Re: your message"


def sent_id(delivery_id: str, domain: str) -> str:
    """The Message-ID (without brackets) of the reply with this outbox delivery id."""
    safe = re.sub(r"[^A-Za-z0-9.-]", "", delivery_id) or "reply"
    return f"lucid.{safe}@{domain}"


def build_reply(*, sender: str, from_name: str, to: str, subject: str, body: str, plain: bool,
                message_id: str, in_reply_to: str | None, references: Sequence[str],
                files: Sequence[tuple[OutFile, bytes]] = ()) -> EmailMessage:
    """The reply (see the module docstring); ``files`` are attached after the text."""
    msg = EmailMessage()
    local, _, domain = sender.partition("@")
    msg["From"] = Address(display_name=from_name, username=local, domain=domain)
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = f"<{message_id}>"
    if in_reply_to:
        msg["In-Reply-To"] = f"<{in_reply_to}>"
        chain = [r for r in references if r != in_reply_to][-(MAX_REFERENCES - 1):] + [in_reply_to]
        msg["References"] = " ".join(f"<{r}>" for r in chain)
    msg["Auto-Submitted"] = "auto-replied"
    msg["X-Auto-Response-Suppress"] = "All"
    text = body if plain else to_plain(body)
    msg.set_content(text if text.endswith("\n") else text + "\n")
    for item, data in files:
        kind = mimetypes.guess_type(item.name)[0] or "application/octet-stream"
        maintype, _, subtype = kind.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=item.name)
    return msg
