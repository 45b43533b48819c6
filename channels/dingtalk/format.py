"""Pure text helpers for the DingTalk adapter: robot messages in, markdown replies out.

In: a robot callback's data (``ChatbotMessage`` from the SDK) becomes a ``Turn`` — every
private message, and a group message only when the robot is @-mentioned (``isInAtList``).
The sender is known by ``senderStaffId``, the stable staff id of a member of the
organisation (the id the admin console shows, and what ``owners``/``allowFrom`` list); a
sender without one (someone from outside the organisation) is known by ``senderId``.

Out: DingTalk's robot ``markdown`` message renders a subset of Markdown (headings, bold,
italic, links, lists, quotes, code), but no tables. A reply is re-written from markdown-it
tokens (``channels._markdown``): links other than http(s) keep only their text, a table
becomes aligned text in a code block, and the one splitter cuts a long reply into messages
that each stand on their own (a code fence is closed and reopened, a table keeps its header).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dingtalk_stream import ChatbotMessage

from lucidgate.channels._markdown import Line, blocks, pack, render_inline, split_text, to_plain
from lucidgate.channels._markdown.commonmark import commonmark_dialect, fenced_unit, raw
from lucidgate.channels.messages import ChatType

logger = logging.getLogger(__name__)

# DingTalk documents no exact ceiling for a robot's markdown text, and clients cut long
# messages off; a reply is sent in parts well below where that happens.
MAX_MESSAGE_CHARS = 4000
TITLE_CHARS = 24  # the title shows in notifications and the chat list, not in the chat

PRIVATE, GROUP = "1", "2"  # ``conversationType``


@dataclass(frozen=True, slots=True)
class Turn:
    """One robot message that is a turn, with where its answer goes."""

    message_id: str
    chat_id: str  # ``conversationId``
    chat_type: ChatType
    sender_id: str
    sender_name: str | None
    text: str
    webhook: str | None  # ``sessionWebhook``: answers this conversation without a token
    webhook_expires_ms: int | None


def parse_turn(data: Mapping[str, Any]) -> Turn | None:
    """The turn in a robot callback's data, or None when it is not one (a group message that
    does not @-mention the robot, or a callback missing its ids)."""
    try:
        msg = ChatbotMessage.from_dict(dict(data))
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning("a DingTalk robot message could not be read (%s); ignored", type(exc).__name__)
        return None
    message_id, chat_id = str(msg.message_id or ""), str(msg.conversation_id or "")
    sender_id = str(msg.sender_staff_id or msg.sender_id or "")
    if not message_id or not chat_id or not sender_id:
        logger.warning("a DingTalk robot message without msgId, conversationId or sender; ignored")
        return None
    group = str(msg.conversation_type) == GROUP
    if group and not msg.is_in_at_list:
        return None
    return Turn(message_id=message_id, chat_id=chat_id, chat_type="group" if group else "private",
                sender_id=sender_id, sender_name=msg.sender_nick or None, text=_text_of(msg),
                webhook=msg.session_webhook or None, webhook_expires_ms=msg.session_webhook_expired_time)


def _text_of(msg: ChatbotMessage) -> str:
    if msg.message_type in ("text", "richText"):
        parts = [str(p) for p in (msg.get_text_list() or []) if p]
        text = "\n".join(p.strip() for p in parts).strip()
        if text:
            return text
    kind = msg.message_type or "unknown"
    return f"[a {kind} message, which this channel cannot read yet: only text reaches the assistant]"


# ----------------------------------------------------------------------------- out

_ESCAPE_RE = re.compile(r"[\\`*\[\]~]|(?<![^\W_])_|_(?![^\W_])|^[#>-](?=\s)|^\d+\.(?=\s)", re.MULTILINE)

DINGTALK = commonmark_dialect(_ESCAPE_RE)


def to_chunks(markdown: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Markdown → DingTalk markdown messages of at most ``limit`` characters; none for blank text."""
    return pack((fenced_unit(block, _line) for block in blocks(markdown)), limit)


def split_plain(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Fixed text (a refusal) split on paragraphs, lines, then words; sent as written."""
    return split_text(text, limit)


def title_of(chunk: str) -> str:
    """A message's title: the start of its first line of text."""
    first = next((line.strip() for line in to_plain(chunk).splitlines() if line.strip()), "")
    return (first[: TITLE_CHARS - 1] + "…") if len(first) > TITLE_CHARS else (first or "reply")


def _line(line: Line) -> str:
    prefix = "> " * line.quote + " " * line.indent + (f"{line.marker} " if line.marker else "")
    if line.kind == "hr":
        return (prefix + "---").rstrip()
    if line.kind in ("code", "fence", "raw"):
        return (prefix + raw(line)).rstrip()
    if line.heading:
        return (prefix + "#" * line.heading + " " + render_inline(line.tokens, DINGTALK)).rstrip()
    return (prefix + render_inline(line.tokens, DINGTALK)).rstrip()
