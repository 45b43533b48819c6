"""A raw mail as the channel reads it: who, which conversation, the text, the attachments.

Parsed with the standard ``email`` package (``policy.default``: decoded headers, typed
address lists, ``get_body`` picking the best text part). The text the model reads is the
plain part; a mail with only an HTML part is converted to text by html2text (links kept as
markdown, images dropped). Quotes and signatures are cut (``strip``). Attachments are kept as
bytes here; the channel saves them, size-capped, under sanitised names (``safe_name``).

Message ids are kept without their angle brackets, as the channel's message ids; a mail
without a Message-ID gets one made from the mailbox's UIDVALIDITY and the mail's UID, which
is as stable as the mail itself.
"""

from __future__ import annotations

import email
import email.policy
import re
import unicodedata
from dataclasses import dataclass, field
from email.message import EmailMessage

from lucidgate.channels.email.strip import strip_reply

__all__ = ["Attachment", "ParsedMail", "clean_id", "html_to_text", "parse_mail", "safe_name"]

_ID = re.compile(r"<([^<>\s]+)>")


@dataclass(frozen=True, slots=True)
class Attachment:
    name: str  # as the sender named it (for the model), not yet sanitised
    content_type: str
    data: bytes


@dataclass(slots=True)
class ParsedMail:
    message: EmailMessage
    sender: str  # the From address, lowercased ("" when it has none)
    sender_name: str
    message_id: str
    subject: str
    in_reply_to: str | None
    references: list[str]
    text: str
    attachments: list[Attachment] = field(default_factory=list)

    @property
    def from_domain(self) -> str:
        return self.sender.rpartition("@")[2]


def clean_id(value: str) -> str:
    """A Message-ID without its angle brackets (and without the spaces some mailers add)."""
    found = _ID.search(value)
    return found.group(1) if found else value.strip().strip("<>").strip()


def _ids(header: object) -> list[str]:
    return _ID.findall(str(header)) if header is not None else []


def html_to_text(html: str) -> str:
    """HTML as readable text: paragraphs, lists and links kept, images and styling dropped."""
    import html2text

    converter = html2text.HTML2Text()
    converter.body_width = 0  # no hard wrapping: the model reads lines as they come
    converter.ignore_images = True
    converter.ignore_emphasis = False
    return str(converter.handle(html)).strip()


def _text_of(msg: EmailMessage) -> str:
    body = msg.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    try:
        content = body.get_content()
    except (LookupError, ValueError, AssertionError):  # an unknown charset or a broken part
        payload = body.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    return html_to_text(content) if body.get_content_type() == "text/html" else content


def _attachments(msg: EmailMessage) -> list[Attachment]:
    found = []
    for part in msg.iter_attachments():
        if part.is_multipart():
            continue
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes):
            continue
        name = part.get_filename() or f"attachment.{part.get_content_subtype() or 'bin'}"
        found.append(Attachment(str(name), part.get_content_type(), data))
    return found


def parse_mail(raw: bytes, fallback_id: str) -> ParsedMail:
    """``raw`` (the bytes IMAP returned) as a ``ParsedMail``; never raises on odd mail."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    sender, name = "", ""
    try:
        sender_header = msg.get("From")
        addresses = getattr(sender_header, "addresses", ())
        if addresses:
            sender, name = str(addresses[0].addr_spec).lower(), str(addresses[0].display_name or "")
    except (IndexError, ValueError, TypeError):
        pass
    message_id = clean_id(str(msg.get("Message-ID", ""))) or fallback_id
    in_reply_to = _ids(msg.get("In-Reply-To"))
    try:
        text = strip_reply(_text_of(msg))
        attachments = _attachments(msg)
    except Exception:  # a part the parser cannot make sense of: what was readable so far
        text, attachments = "", []
    return ParsedMail(msg, sender if "@" in sender else "", name, message_id,
                      " ".join(str(msg.get("Subject", "")).split()),
                      in_reply_to[0] if in_reply_to else None, _ids(msg.get("References")), text, attachments)


def safe_name(name: str, limit: int = 100) -> str:
    """A file name safe in any workspace: the base name only, letters, digits, ``._-``."""
    base = unicodedata.normalize("NFKD", name.replace("\\", "/").rsplit("/", 1)[-1])
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", base.encode("ascii", "ignore").decode()).strip("._") or "attachment"
    stem, dot, suffix = base.rpartition(".")
    if dot and len(suffix) <= 10 and len(base) > limit:
        return f"{stem[:limit - len(suffix) - 1]}.{suffix}"
    return base[:limit]
