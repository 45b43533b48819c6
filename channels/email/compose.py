"""A reply as a MIME message: plain text, threaded, marked as automatic.

* Subject: the mail's subject with one ``Re:`` (never ``Re: Re:``); a mail without a thread
  to answer (a ``message`` tool send to an address) gets ``Message from <name>``.
* ``In-Reply-To`` names the mail answered and ``References`` carries the chain (newest
  ``MAX_REFERENCES``), so every mail client shows one conversation.
* ``Message-ID`` is made from the outbox delivery id: every attempt at sending one reply
  carries the same id, so a receiver that sees a retry twice can tell.
* ``Auto-Submitted: auto-replied`` (RFC 3834): other automatic responders do not answer it.
* The body is the answer's markdown rendered as readable plain text: emphasis marks go,
  a link becomes "text (address)" (a mail reader cannot click markdown), lists get bullets,
  tables become text grids, code stays as written; fixed texts (``plain``) go as written.
  Workspace files named by the answer are attached.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Sequence
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate

from markdown_it.token import Token

from lucidgate.channels._markdown import PLAIN, Dialect, Line, Unit, blocks, grid, pack, render_inline, text_token
from lucidgate.channels.email.threads import MAX_REFERENCES
from lucidgate.channels.outfiles import OutFile

__all__ = ["build_reply", "mail_text", "reply_subject", "sent_id"]

_RE = re.compile(r"^\s*((re|aw|sv|antw)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)


def _link_end(tok: Token) -> str:
    href = str(tok.attrs.get("href", "")) if tok.type == "link_open" else ""
    return f" ({href})" if href else ""


_MAIL = Dialect(text=PLAIN.text, special=PLAIN.special, code=PLAIN.code, open=lambda t: "", close=_link_end)


def _mail_line(line: Line) -> str | None:
    if line.kind == "fence":
        return None
    bullet = ("•" if line.marker == "-" else line.marker) + " " if line.marker else ""
    prefix = "> " * line.quote + " " * line.indent + bullet
    if line.kind == "hr":
        return prefix + "———"
    return (prefix + render_inline(line.tokens, _MAIL)).rstrip()


def mail_text(markdown: str) -> str:
    """Markdown as the plain text of a mail (see the module docstring)."""
    units = []
    for block in blocks(markdown):
        if block.kind == "table":
            units.append(Unit([Line((text_token(r),), "raw") for r in grid(block)], _mail_line))
        else:
            units.append(Unit(block.lines, _mail_line))
    return "\n\n".join(pack(units, limit=1 << 62))


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
    text = body if plain else mail_text(body)
    msg.set_content(text if text.endswith("\n") else text + "\n")
    for item, data in files:
        kind = mimetypes.guess_type(item.name)[0] or "application/octet-stream"
        maintype, _, subtype = kind.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=item.name)
    return msg
