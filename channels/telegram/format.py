"""Pure translation for the Telegram channel: replies to Telegram HTML, messages to our text.

Outbound, markdown (as the model writes it) becomes Telegram-safe HTML split to the
message limit. Inbound, a group message counts only when it addresses the bot, and its
text loses the ``@botname`` mention and command suffix. No I/O here: everything is tested
on plain values and recorded Telegram JSON.

Telegram's HTML mode accepts a handful of tags and insists they balance; anything else
(an unescaped ``<``, a stray tag) fails the whole message with "can't parse entities".
So the conversion escapes first, converts only well-understood constructs (bold, italic,
strike, inline code, fenced code, links, headings, bullets) one line at a time, and falls
back to the plain escaped line if the result would not balance.

Splitting works on converted *units* (a line of text, or a whole code block), so every
chunk is valid HTML on its own: chunks break between paragraphs first, then between
lines; a code block moves whole to the next chunk when it fits there, and only a block
longer than a message is cut — closing ``</code></pre>`` and reopening it in the next chunk.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from telegram import Message, MessageEntity

    from channels.base import CommandSpec

MAX_MESSAGE_CHARS = 4096

_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+#.-]*)\s*$")
_PLACEHOLDER = re.compile("\x00(\\d+)\x00")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?|tg|mailto):[^)\s]+)\)")
_BARE_URL = re.compile(r"https?://[^\s<>\"]+")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])"
    r"|(?<![\w_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w_])"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")
_TAG = re.compile(r"<(/?)([a-z]+)[^>]*>")
_COMMAND = re.compile(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?(?=\s|$)")
_MENU_NAME = re.compile(r"[a-z0-9_]{1,32}")
_MIME_EXT = {"application/pdf": ".pdf", "application/zip": ".zip", "application/json": ".json",
             "text/plain": ".txt", "text/csv": ".csv", "text/markdown": ".md", "image/jpeg": ".jpg",
             "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif", "audio/mpeg": ".mp3",
             "audio/ogg": ".ogg", "audio/mp4": ".m4a", "video/mp4": ".mp4", "video/quicktime": ".mov"}
_MEDIA = {"photo": ("image", ".jpg"), "voice": ("voice", ".ogg"), "audio": ("audio", ".mp3"),
          "video": ("video", ".mp4"), "document": ("file", ".bin")}


@dataclass(frozen=True, slots=True)
class _Code:
    lang: str
    lines: list[str]


def markdown_to_html(text: str) -> str:
    """The whole text as one HTML string (no length limit)."""
    return "\n".join(html_ for html_, _sep in _units(text))


def html_to_plain(text: str) -> str:
    """The text a chunk shows, without markup: the plain-text fallback."""
    return html.unescape(_TAG.sub("", text))


def render(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Markdown → HTML chunks, each at most ``limit`` characters."""
    chunks: list[str] = []
    current: list[tuple[str, str]] = []
    size = 0
    for unit in _units(text, limit):
        grow = len(unit[0]) + (len(unit[1]) if current else 0)
        if current and size + grow > limit:
            starts_block = unit[1] == "\n\n" or unit[0].startswith("<pre>")
            keep, carry = (current, []) if starts_block else _break_point(current, limit)
            chunks.append(_join(keep))
            current, size = carry, len(_join(carry))
            if current and size + len(unit[1]) + len(unit[0]) > limit:
                chunks.append(_join(current))
                current, size = [], 0
            grow = len(unit[0]) + (len(unit[1]) if current else 0)
        current.append(unit)
        size += grow
    if current:
        chunks.append(_join(current))
    return [c for c in chunks if c.strip()]


def _join(units: list[tuple[str, str]]) -> str:
    return "".join((sep if i else "") + html_ for i, (html_, sep) in enumerate(units))


def _break_point(
    units: list[tuple[str, str]], limit: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Prefer ending a chunk at a paragraph or code-block start in its second half."""
    size = 0
    best = 0
    for i, (html_, sep) in enumerate(units):
        if i and (sep == "\n\n" or html_.startswith("<pre>")) and size >= limit // 2:
            best = i
        size += len(html_) + (len(sep) if i else 0)
    if best:
        return units[:best], units[best:]
    return units, []


def split_plain(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Text split on paragraph, then line, then word boundaries; never inside ``&entity;``."""
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[: limit + 1]
        cut = window.rfind("\n\n")
        if cut <= 0:
            cut = window.rfind("\n")
        if cut <= 0:
            cut = window.rfind(" ")
        if cut <= 0:
            cut = _safe_cut(rest, limit)
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest.strip():
        chunks.append(rest)
    return chunks


# -- units -----------------------------------------------------------------------------
def _units(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[tuple[str, str]]:
    """(html, separator-before) pairs; each html balanced and at most ``limit`` long."""
    out: list[tuple[str, str]] = []
    blank = False
    for block in _blocks(text):
        if isinstance(block, _Code):
            for piece in _code_pieces(block, limit):
                out.append((piece, "\n"))
            blank = False
            continue
        if not block.strip():
            blank = True
            continue
        sep = "\n\n" if blank else "\n"
        blank = False
        for piece in _fit(convert_line(block), block, limit):
            out.append((piece, sep))
            sep = "\n"
    return out


def _blocks(text: str) -> list[str | _Code]:
    """Lines of prose and whole fenced code blocks, in order (an open fence runs to the end)."""
    blocks: list[str | _Code] = []
    code: _Code | None = None
    fence = ""
    for line in text.replace("\r\n", "\n").split("\n"):
        match = _FENCE.match(line)
        if code is None and match:
            fence, code = match.group(1), _Code(match.group(2), [])
        elif code is not None and match and match.group(1) == fence and not match.group(2):
            blocks.append(code)
            code = None
        elif code is not None:
            code.lines.append(line)
        else:
            blocks.append(line)
    if code is not None:
        blocks.append(code)
    return blocks


def _code_pieces(block: _Code, limit: int) -> list[str]:
    lang = re.sub(r"[^\w+#-]", "", block.lang)
    head = f'<pre><code class="language-{lang}">' if lang else "<pre><code>"
    tail = "</code></pre>"
    room = max(1, limit - len(head) - len(tail))
    pieces: list[str] = []
    body = ""
    for line in block.lines:
        for part in _hard_cut(html.escape(line, quote=False), room):
            candidate = f"{body}\n{part}" if body else part
            if len(candidate) > room and body:
                pieces.append(head + body + tail)
                candidate = part
            body = candidate
    pieces.append(head + body + tail)
    return pieces


def _fit(converted: str, source: str, limit: int) -> list[str]:
    """A converted line that is too long falls back to escaped text cut at word boundaries."""
    if len(converted) <= limit:
        return [converted]
    escaped = html.escape(source, quote=False)
    return [p for chunk in split_plain(escaped, limit) for p in _hard_cut(chunk, limit)]


def _hard_cut(escaped: str, limit: int) -> list[str]:
    """Cut escaped text to ``limit`` without splitting an ``&entity;``."""
    pieces: list[str] = []
    while len(escaped) > limit:
        cut = _safe_cut(escaped, limit)
        pieces.append(escaped[:cut])
        escaped = escaped[cut:]
    pieces.append(escaped)
    return pieces


def _safe_cut(text: str, limit: int) -> int:
    amp = text.rfind("&", max(0, limit - 9), limit)
    if amp > 0 and ";" not in text[amp:limit] and ";" in text[limit : amp + 10]:
        return amp
    return limit


# -- inline ----------------------------------------------------------------------------
def convert_line(line: str) -> str:
    """One line of markdown → Telegram HTML (balanced, or the escaped line)."""
    stash: list[str] = []

    def keep(fragment: str) -> str:
        stash.append(fragment)
        return f"\x00{len(stash) - 1}\x00"

    heading = _HEADING.match(line)
    if heading:  # the whole heading is bold already; nested <b> helps nobody
        text = heading.group(1).replace("**", "").replace("__", "")
    else:
        text = _BULLET.sub(lambda m: f"{m.group(1)}• ", line)
    text = _INLINE_CODE.sub(lambda m: keep(f"<code>{html.escape(m.group(1), quote=False)}</code>"), text)
    text = _LINK.sub(
        lambda m: keep(f'<a href="{html.escape(m.group(2))}">{html.escape(m.group(1), quote=False)}</a>'),
        text,
    )
    text = _BARE_URL.sub(lambda m: keep(html.escape(m.group(0), quote=False)), text)
    text = html.escape(text, quote=False)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    text = _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
    text = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    if heading:
        text = f"<b>{text}</b>"
    result = _PLACEHOLDER.sub(lambda m: stash[int(m.group(1))], text)
    if not _balanced(result):
        return html.escape(line, quote=False)
    return result


def _balanced(fragment: str) -> bool:
    stack: list[str] = []
    for match in _TAG.finditer(fragment):
        closing, name = match.group(1), match.group(2)
        if not closing:
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack


# -- inbound ---------------------------------------------------------------------------
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
