"""Pure text helpers for the Slack adapter: replies as standard Markdown, commands, events.

Replies go out in Slack's ``markdown`` block, which renders standard Markdown itself, so
the text is not converted to mrkdwn. It is still re-written from markdown-it tokens
(``channels._markdown``), for two reasons: a link to anything but http(s) (``javascript:``,
``data:``...) must reach Slack as its plain text, and a chunk cut from a long reply must
stand on its own (a mark open across a line break is closed and reopened, a code fence or
table header is repeated in the next chunk). Every chunk also carries a plain-text
fallback (``text``), which Slack shows in notifications and where blocks cannot render.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from markdown_it.token import Token
from slack_sdk.models.blocks import MarkdownBlock

from lucidgate.channels._markdown import (Block, Dialect, Line, Unit, blocks, fence_for, pack, render_inline,
                                          split_text, text_token, to_plain, utf16_len)

# A markdown block holds 12,000 characters (cumulative per message), and Slack truncates
# the display of long messages well before; one block of under 4,000 per message.
SLACK_CHUNK_CHARS = 3900

# Commands the agent understands (DESIGN §7). A leading "/" belongs to Slack, so users type
# these as plain text after an @mention or in a DM.
_BARE_COMMANDS = ("help", "new", "stop", "status", "dream", "dream-log", "dream_log")
_ARG_COMMANDS = ("dream-restore", "dream_restore")
_COMMAND_RE = re.compile(
    r"^/?(?:(?P<bare>" + "|".join(map(re.escape, _BARE_COMMANDS)) + r")"
    r"|(?P<cmd>" + "|".join(map(re.escape, _ARG_COMMANDS)) + r")(?P<args>(?:\s+\S+)*))\s*$",
    re.IGNORECASE,
)

_TICKS_RE = re.compile(r"`+")
# "_" only where it is not inside a word, "<" only where a tag or an autolink could start
_ESCAPE_RE = re.compile(r"[\\`*\[\]~]|(?<![^\W_])_|_(?![^\W_])|<(?=[A-Za-z/!?]|$)")
_PIPE_RE = re.compile(r"(?<!\\)\|")
_MARKUP = {"strong_open": "**", "em_open": "*", "s_open": "~~"}
_RULE = {"left": ":--", "right": "--:", "center": ":-:"}


def _code(tok: Token) -> str:
    ticks = tok.markup or "`" * (max((len(run) for run in _TICKS_RE.findall(tok.content)), default=0) + 1)
    edge = tok.content[:1] + tok.content[-1:]
    # CommonMark strips one space from each end when both have one: pad to keep the text
    pad = " " if "`" in edge or (edge == "  " and tok.content.strip()) else ""
    return f"{ticks}{pad}{tok.content}{pad}{ticks}"


def _text(text: str) -> str:
    """Escape what could turn text into markup where the text now stands: a dropped link's
    brackets must not pair into a new link, a stray backtick not into code."""
    return _ESCAPE_RE.sub(r"\\\g<0>", text)


def _open(tok: Token) -> str:
    # an autolink (<https://…>) is written as [text](href) too: a hard cut may split its text
    return "[" if tok.type == "link_open" else tok.markup or _MARKUP[tok.type]


def _close(tok: Token) -> str:
    if tok.type != "link_open":
        return tok.markup or _MARKUP[tok.type]
    href = str(tok.attrs.get("href", ""))
    if href.count("(") != href.count(")") or " " in href:
        href = href.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
    return f"]({href})"


# Escapes and entities are written back as they came (markdown-it keeps them as
# ``text_special`` tokens with their markup); Slack honours backslash escapes.
MARKDOWN = Dialect(text=_text, special=lambda tok: tok.markup or tok.content, code=_code,
                   open=_open, close=_close)


def to_chunks(markdown: str, limit: int = SLACK_CHUNK_CHARS) -> list[str]:
    """Markdown → chunks of standard Markdown for ``markdown`` blocks, each at most
    ``limit`` characters and readable on its own; none for blank text."""
    return pack((_unit(block) for block in blocks(markdown)), limit, utf16_len)


def split_plain(text: str, limit: int = SLACK_CHUNK_CHARS) -> list[str]:
    """Plain text (sent as written) split on paragraphs, then lines, then words."""
    return split_text(text, limit, utf16_len)


def payload(chunk: str) -> dict[str, Any]:
    """The ``chat.postMessage`` / ``chat.update`` fields for one chunk: the Markdown in a
    ``markdown`` block, and its plain text as the fallback."""
    return {"blocks": [MarkdownBlock(text=chunk).to_dict()], "text": to_plain(chunk) or chunk}


def _unit(block: Block) -> Unit:
    if block.kind == "code":
        fence = fence_for(_raw_lines(block.lines))
        return Unit(block.lines, _raw, f"{fence}{block.lang}\n", f"\n{fence}")
    if block.kind == "table":
        rows = [_row(row) for row in block.rows]
        rows.insert(1, "| " + " | ".join(_RULE.get(a, "---") for a in block.aligns) + " |")
        lines = [Line((text_token(r),), "raw") for r in rows]
        return Unit(lines[2:], _raw, lead=lines[:2])
    return Unit(block.lines, _line)


def _row(cells: tuple[tuple[Token, ...], ...]) -> str:
    return "| " + " | ".join(_PIPE_RE.sub(r"\\|", render_inline(c, MARKDOWN)) for c in cells) + " |"


def _raw_lines(lines: Iterable[Line]) -> list[str]:
    return [line.tokens[0].content for line in lines if line.tokens]


def _raw(line: Line) -> str:
    return line.tokens[0].content if line.tokens else ""


def _line(line: Line) -> str:
    prefix = "> " * line.quote + " " * line.indent + (f"{line.marker} " if line.marker else "")
    if line.kind == "hr":
        body = "---"
    elif line.kind in ("code", "fence", "raw"):
        body = _raw(line)
    else:
        body = ("#" * line.heading + " " if line.heading else "") + render_inline(line.tokens, MARKDOWN)
    return (prefix + body).rstrip()


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """Remove the bot's own ``<@BOTID>`` (or ``<@BOTID|name>``) mention from ``text``."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>:?", " ", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def as_command(text: str) -> str | None:
    """``"dream-log"`` / ``"/status"`` -> ``"/dream-log"`` / ``"/status"``; None for chat.

    Only a message that is exactly a command (plus arguments for commands that take one)
    counts, so "new ideas for dinner" stays a normal message.
    """
    match = _COMMAND_RE.match(text.strip())
    if match is None:
        return None
    if match.group("bare"):
        return "/" + match.group("bare").lower()
    args = match.group("args").strip()
    return "/" + match.group("cmd").lower() + (f" {args}" if args else "")


# ----------------------------------------------------------------------------- events

_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))
_TS_RE = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True, slots=True)
class SlackEvent:
    """The parts of a Slack message event the adapter turns into an ``InboundMessage``."""

    chat_id: str
    sender_id: str
    text: str
    ts: str
    chat_type: Literal["private", "group"]
    thread_id: str | None = None
    files: tuple[dict[str, Any], ...] = ()


def is_message_ts(value: str | None) -> bool:
    """A Slack message timestamp (what reactions and threads are keyed by)."""
    return bool(value) and _TS_RE.match(value or "") is not None


def parse_event(event: dict[str, Any], bot_user_id: str | None) -> SlackEvent | None:
    """Translate a ``message`` / ``app_mention`` event; None for what must be ignored.

    DMs (``channel_type == "im"``): every message is a turn. Channels: only ``app_mention``,
    answered in the thread. Bot messages (ours included), edits, deletions and every other
    subtype except ``file_share`` are ignored.
    """
    kind = event.get("type")
    subtype = event.get("subtype")
    user = event.get("user")
    channel = event.get("channel")
    ts = event.get("ts")
    if subtype not in (None, "file_share") or event.get("bot_id") or event.get("bot_profile"):
        return None
    if not isinstance(user, str) or not isinstance(channel, str) or not isinstance(ts, str):
        return None
    if bot_user_id and user == bot_user_id:
        return None
    if kind == "message":
        if event.get("channel_type") != "im":
            return None  # in channels only an @mention (app_mention) starts a turn
        chat_type: Literal["private", "group"] = "private"
        thread_id = None
    elif kind == "app_mention":
        if channel.startswith("D"):
            return None  # a mention inside a DM also arrives as message.im
        chat_type = "group"
        thread_id = str(event.get("thread_ts") or ts)
    else:
        return None
    text = strip_mention(str(event.get("text") or ""), bot_user_id)
    for entity, char in _ENTITIES:
        text = text.replace(entity, char)
    text = as_command(text) or text
    files = tuple(f for f in event.get("files") or () if isinstance(f, dict))
    return SlackEvent(channel, user, text, ts, chat_type, thread_id, files)
