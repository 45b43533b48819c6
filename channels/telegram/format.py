"""Pure translation for the Telegram channel, inbound: Telegram messages to our text.

A group message counts only when it addresses the bot, and its text loses the
``@botname`` mention and command suffix; the command menu and attachment names are made
here too. No I/O: everything is tested on plain values and recorded Telegram JSON.
Replies going out (markdown to Telegram HTML) are ``channels.telegram.markdown``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from telegram import Message, MessageEntity

    from lucidgate.channels.base import CommandSpec

_COMMAND = re.compile(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?(?=\s|$)")
_MENU_NAME = re.compile(r"[a-z0-9_]{1,32}")
_MIME_EXT = {"application/pdf": ".pdf", "application/zip": ".zip", "application/json": ".json",
             "text/plain": ".txt", "text/csv": ".csv", "text/markdown": ".md", "image/jpeg": ".jpg",
             "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif", "audio/mpeg": ".mp3",
             "audio/ogg": ".ogg", "audio/mp4": ".m4a", "video/mp4": ".mp4", "video/quicktime": ".mov"}
_MEDIA = {"photo": ("image", ".jpg"), "voice": ("voice", ".ogg"), "audio": ("audio", ".mp3"),
          "video": ("video", ".mp4"), "document": ("file", ".bin")}


def is_addressed(msg: Message, entities: dict[MessageEntity, str], bot_id: int, username: str) -> bool:
    """In a group only a mention, a command for us, or a reply to one of our messages counts."""
    reply = msg.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot_id:
        return True
    username = username.lower()
    for entity, value in entities.items():
        if entity.type == "mention" and value.lower() == f"@{username}":
            return True
        if entity.type == "text_mention" and entity.user is not None and entity.user.id == bot_id:
            return True
        if entity.type == "bot_command" and entity.offset == 0:
            _, _, addressee = value.partition("@")
            if not addressee or addressee.lower() == username:
                return True
    return False


def clean_text(text: str, username: str) -> str:
    """Drop ``@botname`` mentions and command suffixes; ``/start`` means ``/help``."""
    command = _COMMAND.match(text)
    if command and (command.group(2) is None or command.group(2).lower() == username.lower()):
        if command.group(1).lower() == "start":
            return "/help"
        text = f"/{command.group(1)}{text[command.end():]}"
    if username:
        text = re.sub(rf"(?<![\w@])@{re.escape(username)}\b", "", text, flags=re.IGNORECASE)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def menu_commands(specs: Iterable[CommandSpec]) -> list[tuple[str, str]]:
    """The bot's command menu from the gateway's commands: ``dream-log`` is listed as
    ``dream_log`` (the menu allows only ``[a-z0-9_]``, at most 32 characters; the gateway
    answers to both spellings), descriptions are cut to Telegram's 256 characters."""
    menu: list[tuple[str, str]] = []
    for spec in specs:
        name = spec.name.lower().replace("-", "_")
        if not _MENU_NAME.fullmatch(name) or any(name == seen for seen, _ in menu):
            continue
        description = (spec.description.strip() or name)[:256]
        menu.append((name, description[:1].upper() + description[1:]))
    return menu


def media_items(msg: Message) -> list[tuple[str, Any, str]]:
    """(label, PTB file object, file extension) for each attachment we download."""
    items = []
    for kind, (label, default_ext) in _MEDIA.items():
        item = getattr(msg, kind, None)
        if not item:
            continue
        if kind == "photo":
            item = item[-1]  # the largest size
        items.append((label, item, _extension(kind, item, default_ext)))
    return items


def safe_name(value: str) -> str:
    """A path component that cannot escape its directory."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", value)[:100] or "_"


def _extension(kind: str, item: Any, default: str) -> str:
    suffix = Path(getattr(item, "file_name", None) or "").suffix.lower()
    if re.fullmatch(r"\.[a-z0-9]{1,8}", suffix):
        return suffix
    if kind == "voice":
        return default
    return _MIME_EXT.get(str(getattr(item, "mime_type", "") or "").lower(), default)
