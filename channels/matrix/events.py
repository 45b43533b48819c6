"""Pure translation for the Matrix channel, inbound: room events to what a turn needs.

``parse_message`` looks at one raw timeline event (the JSON a homeserver's ``/sync`` returns)
and says whether it is a person's message worth a turn, with its text and attachment; the
channel adds who may speak and where. No I/O: everything is tested on recorded event JSON.

What counts: ``m.room.message`` with msgtype ``m.text``, ``m.emote`` or a file kind
(``m.image``, ``m.file``, ``m.audio``, ``m.video``). Not counted: our own events, edits
(``m.replace``: the original was already answered), and ``m.notice`` (by convention what
bots send; answering them makes two bots talk forever). In a room (not a direct chat) the
message must mention the bot: its id in ``m.mentions`` (what current clients send, replies
to the bot included), a ``matrix.to`` pill to it, or its id or name written at the start.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

FILE_KINDS = {"m.image": "image", "m.file": "file", "m.audio": "audio", "m.video": "video"}
TEXT_KINDS = frozenset({"m.text", "m.emote"})
_MIME_EXT = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp",
             "audio/ogg": ".ogg", "audio/mpeg": ".mp3", "audio/mp4": ".m4a", "video/mp4": ".mp4",
             "application/pdf": ".pdf", "text/plain": ".txt"}
_PILL = re.compile(r'href="https://matrix\.to/#/([^"?]+)')


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file a message carries: its ``mxc://`` URI, a name and what the sender said of it."""

    label: str  # image, file, audio, video
    url: str
    name: str
    size: int | None
    mimetype: str | None


@dataclass(frozen=True, slots=True)
class Parsed:
    """A person's message: ``text`` with our mention removed, and at most one attachment."""

    event_id: str
    sender: str
    text: str
    attachment: Attachment | None
    mentioned: bool


def parse_message(event: dict[str, Any], *, bot_id: str, bot_name: str | None) -> Parsed | None:
    """The message in ``event``, or None when it is not one we answer anywhere."""
    if event.get("type") != "m.room.message" or event.get("sender") == bot_id:
        return None
    content = event.get("content")
    event_id, sender = event.get("event_id"), event.get("sender")
    if not isinstance(content, dict) or not isinstance(event_id, str) or not isinstance(sender, str):
        return None
    relates = content.get("m.relates_to")
    if isinstance(relates, dict) and relates.get("rel_type") == "m.replace":
        return None
    msgtype = content.get("msgtype")
    raw_body = content.get("body")
    body = raw_body if isinstance(raw_body, str) else ""
    attachment = None
    if msgtype in FILE_KINDS:
        attachment = _attachment(msgtype, content, body)
        if attachment is None:
            return None
        body = ""
    elif msgtype not in TEXT_KINDS:
        return None
    body = strip_reply_fallback(body)
    mentioned = is_mentioned(content, body, bot_id=bot_id, bot_name=bot_name)
    return Parsed(event_id, sender, clean_text(body, bot_id=bot_id, bot_name=bot_name), attachment, mentioned)


def _attachment(msgtype: str, content: dict[str, Any], body: str) -> Attachment | None:
    url = content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://"):
        return None  # an encrypted file ("file" instead of "url") cannot be read
    raw_info = content.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    size = info.get("size") if isinstance(info.get("size"), int) else None
    mimetype = info.get("mimetype") if isinstance(info.get("mimetype"), str) else None
    filename = content.get("filename")
    name = filename if isinstance(filename, str) else body
    return Attachment(FILE_KINDS[msgtype], url, name or FILE_KINDS[msgtype], size, mimetype)


def is_mentioned(content: dict[str, Any], body: str, *, bot_id: str, bot_name: str | None) -> bool:
    """Does the message address the bot (``m.mentions``, a pill, or its id/name up front)?"""
    mentions = content.get("m.mentions")
    if isinstance(mentions, dict):
        ids = mentions.get("user_ids")
        if isinstance(ids, list) and bot_id in ids:
            return True
    formatted = content.get("formatted_body")
    if isinstance(formatted, str) and any(unquote(m) == bot_id for m in _PILL.findall(formatted)):
        return True
    if bot_id.lower() in body.lower():
        return True
    return _leading_name(body, bot_id, bot_name) is not None


def _names(bot_id: str, bot_name: str | None) -> list[str]:
    local = bot_id[1:].split(":", 1)[0] if bot_id.startswith("@") else bot_id
    return [n for n in dict.fromkeys([bot_id, bot_name or "", local]) if n]


def _leading_name(body: str, bot_id: str, bot_name: str | None) -> re.Match[str] | None:
    for name in _names(bot_id, bot_name):
        match = re.match(rf"\s*@?{re.escape(name)}\s*[:,]\s*", body, flags=re.IGNORECASE)
        if match:
            return match
    return None


def clean_text(body: str, *, bot_id: str, bot_name: str | None) -> str:
    """The text without the leading "name:" address and without the bot's id anywhere."""
    match = _leading_name(body, bot_id, bot_name)
    if match:
        body = body[match.end():]
    body = re.sub(re.escape(bot_id), "", body, flags=re.IGNORECASE)
    return re.sub(r"[ \t]{2,}", " ", body).strip()


def strip_reply_fallback(body: str) -> str:
    """Drop the "> <@who> quoted" lines older clients put before a reply's own text."""
    if not body.startswith("> <"):
        return body
    lines = body.split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith(">"):
        i += 1
    return "\n".join(lines[i:]).strip()


def file_name(event_id: str, attachment: Attachment) -> str:
    """A file name for a download that is safe, unique per event and keeps the extension."""
    suffix = ""
    dot = attachment.name.rfind(".")
    if dot > 0 and re.fullmatch(r"\.[A-Za-z0-9]{1,8}", attachment.name[dot:]):
        suffix = attachment.name[dot:].lower()
    elif attachment.mimetype:
        suffix = _MIME_EXT.get(attachment.mimetype.lower(), "")
    return safe_component(event_id) + (suffix or ".bin")


def safe_component(value: str) -> str:
    """A path component that cannot escape its folder or collide with another value's."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", value)[:80].strip("_") or "x"
    return f"{readable}-{hashlib.sha256(value.encode()).hexdigest()[:10]}"
