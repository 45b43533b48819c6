"""Pure text helpers for the Discord adapter: replies as Discord markdown, mentions, names.

Discord renders most of CommonMark itself (``**bold**``, ``*em*``, ``~~strike~~``, code
spans and fences, ``>`` quotes, lists, ``#``–``###`` headings, ``[text](url)`` links), so a
reply is re-written from markdown-it tokens (``channels._markdown``) rather than converted:
that drops links to anything but http(s), escapes text that would otherwise turn into
Discord-only markup (``||spoiler||``, ``__underline__``, a stray backtick), shows tables as
aligned text in a code block (Discord has no tables) and lets the one splitter cut a long
reply into pieces of at most 2,000 characters that each stand on their own (a code fence is
closed and reopened, a table keeps its header).
"""

from __future__ import annotations

import re

from lucidgate.channels._markdown import Line, blocks, pack, render_inline, split_text, utf16_len
from lucidgate.channels._markdown.commonmark import commonmark_dialect, fenced_unit, raw

MAX_MESSAGE_CHARS = 2000  # Discord's limit for a message's content

# Markup characters Discord reads anywhere in text; "_" only at a word's edge, "#", "-" and
# ">" only where they would start a heading, list item or quote.
_ESCAPE_RE = re.compile(r"[\\`*\[\]~|]|(?<![^\W_])_|_(?![^\W_])|^[#>-](?=\s)|^\d+\.(?=\s)", re.MULTILINE)

DISCORD = commonmark_dialect(_ESCAPE_RE)


def to_chunks(markdown: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Markdown → Discord messages of at most ``limit`` characters each; none for blank text."""
    return pack((fenced_unit(block, _line) for block in blocks(markdown)), limit, utf16_len)


def split_plain(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Fixed text (a refusal) split on paragraphs, lines, then words; sent as written."""
    return split_text(text, limit, utf16_len)


def _line(line: Line) -> str:
    prefix = "> " * line.quote + " " * line.indent + (f"{line.marker} " if line.marker else "")
    if line.kind == "hr":
        return (prefix + "───").rstrip()
    if line.kind in ("code", "fence", "raw"):
        return (prefix + raw(line)).rstrip()
    if line.heading:  # Discord renders # to ###; deeper levels as bold
        level = line.heading
        body = render_inline(line.tokens, DISCORD, bold=level > 3)
        return (prefix + ("#" * level + " " if level <= 3 else "") + body).rstrip()
    return (prefix + render_inline(line.tokens, DISCORD)).rstrip()


# ----------------------------------------------------------------------------- intake

def strip_mention(text: str, bot_id: str | None) -> str:
    """Remove the bot's own mention from ``text`` (the rest is what was said to it)."""
    if bot_id:
        text = re.sub(rf"<@!?{re.escape(bot_id)}>,?:?", " ", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def safe_name(part: str, fallback: str = "file") -> str:
    """A file-name-safe version of an id or an attachment's name (no path separators)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", part).strip("._")[:80]
    return cleaned or fallback
