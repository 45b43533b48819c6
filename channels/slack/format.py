"""Pure text helpers for the Slack adapter: Markdown -> mrkdwn, splitting, commands.

The agent writes ordinary Markdown; Slack renders its own "mrkdwn" dialect, where ``*x*`` is
bold, links are ``<url|text>`` and ``&``, ``<``, ``>`` must be escaped. Code is kept verbatim
(only escaped), so what the model put in a code block reaches the user unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

# Slack accepts 40,000 characters but truncates the display well before; stay under 4,000.
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

_FENCE_RE = re.compile(r"```[^\n`]*\n?(.*?)```", re.DOTALL)
_INLINE_CODE_RE = re.compile(r"`[^`\n]+`")
_LINK_RE = re.compile(r"!?\[([^\]\n]+)\]\((\S+?)\)")
_AUTOLINK_RE = re.compile(r"&lt;(https?://[^\s&]+)&gt;")
_HEADING_RE = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_BULLET_RE = re.compile(r"^([ \t]*)[-*+][ \t]+", re.MULTILINE)
_QUOTE_RE = re.compile(r"^&gt;[ \t]?", re.MULTILINE)
_BOLD_RE = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC_RE = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE_RE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HOLD_RE = re.compile("\x00(\\d+)\x00")


def escape(text: str) -> str:
    """Escape Slack's three control characters (required in text and in code)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Convert the Markdown an LLM writes into Slack mrkdwn."""
    held: list[str] = []

    def hold(value: str) -> str:
        held.append(value)
        return f"\x00{len(held) - 1}\x00"

    def fence(match: re.Match[str]) -> str:
        # Slack shows a language tag as code text, so only the body is kept.
        body = match.group(1)
        if body and not body.endswith("\n"):
            body += "\n"
        return hold("```\n" + escape(body) + "```")

    text = _FENCE_RE.sub(fence, markdown)
    text = _INLINE_CODE_RE.sub(lambda m: hold(escape(m.group(0))), text)
    text = escape(text)
    text = _QUOTE_RE.sub(lambda m: hold("> "), text)
    text = _LINK_RE.sub(lambda m: hold(f"<{m.group(2)}|{m.group(1).replace('|', '¦')}>"), text)
    text = _AUTOLINK_RE.sub(lambda m: hold(f"<{m.group(1)}>"), text)
    # a heading is bold as a whole; held so the italic pass cannot turn it into _x_
    text = _HEADING_RE.sub(lambda m: hold("*" + _inline(m.group(1).replace("**", "")) + "*"), text)
    text = _BULLET_RE.sub(lambda m: m.group(1) + "• ", text)
    text = _inline(text)
    while _HOLD_RE.search(text):  # held values may nest (a link holding inline code)
        text = _HOLD_RE.sub(lambda m: held[int(m.group(1))], text)
    return text


def _inline(text: str) -> str:
    text = _ITALIC_RE.sub(lambda m: "_" + m.group(1) + "_", text)
    text = _BOLD_RE.sub(lambda m: "*" + (m.group(1) or m.group(2)) + "*", text)
    return _STRIKE_RE.sub(lambda m: "~" + m.group(1) + "~", text)


def _blocks(text: str) -> list[str]:
    """Paragraphs, with each fenced code block kept whole even if it has blank lines."""
    blocks: list[str] = []
    current: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if line.strip().startswith("```"):
            # a fence that both opens and closes on one line does not change state
            if line.strip().count("```") % 2 == 1:
                in_code = not in_code
        if not in_code and not line.strip() and current:
            blocks.append("\n".join(current))
            current = []
        elif in_code or line.strip() or current:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _hard_cut(line: str, limit: int) -> list[str]:
    pieces: list[str] = []
    while len(line) > limit:
        cut = line.rfind(" ", limit // 2, limit)
        cut = cut if cut > 0 else limit
        pieces.append(line[:cut])
        line = line[cut:].lstrip(" ")
    return pieces + ([line] if line else [])


def _split_block(block: str, limit: int) -> list[str]:
    """Split one over-long paragraph or code block on line boundaries."""
    is_code = block.lstrip().startswith("```") and block.rstrip().endswith("```")
    lines = block.split("\n")
    if is_code:
        lines = lines[1:-1]  # the fences are re-added around every piece
        limit -= 8  # room for "```\n" + "\n```"
    parts = [part for line in lines for part in (_hard_cut(line, limit) or [""])]
    pieces = _pack(parts, limit, "\n")
    return [f"```\n{p}\n```" for p in pieces] if is_code else pieces


def split_message(text: str, limit: int = SLACK_CHUNK_CHARS) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters.

    Cuts fall between paragraphs, then between lines; a code block is only cut when it is
    longer than a whole chunk, and then every piece is re-fenced so each renders as code.
    """
    if len(text) <= limit:
        return [text] if text.strip() else []
    pieces = [piece for block in _blocks(text)
              for piece in ([block] if len(block) <= limit else _split_block(block, limit))]
    return _pack(pieces, limit, "\n\n")


def _pack(pieces: list[str], limit: int, sep: str) -> list[str]:
    """Join consecutive pieces with ``sep`` greedily, never past ``limit`` characters."""
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        candidate = f"{current}{sep}{piece}" if current else piece
        if len(candidate) > limit and current:
            chunks.append(current)
            current = piece
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


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
