"""Replies as Matrix message content: markdown to ``org.matrix.custom.html``, split, edited.

Pure functions, no I/O. Matrix renders a generous subset of HTML, which is what
markdown-it writes natively, so a reply's ``formatted_body`` is the markdown rendered with
raw HTML escaped (never passed through) and only http(s) links kept as links; ``body`` is
the same text as plain text, for clients without HTML and for notifications.

An event may be at most 64 KiB of JSON, HTML and plain body together, so a long reply is
cut into pieces of ``MAX_CHUNK_CHARS`` at paragraph boundaries outside code fences (a piece
that is one huge paragraph or fence is cut between lines, the fence closed and reopened).

Streaming previews are edits (``m.replace``): the edit event carries the new text in
``m.new_content`` and a ``* ``-prefixed fallback for clients that do not show edits.
"""

from __future__ import annotations

import re
from typing import Any

from markdown_it import MarkdownIt

from lucidgate.channels._markdown import link_allowed, split_text, to_plain

MAX_CHUNK_CHARS = 8000
HTML_FORMAT = "org.matrix.custom.html"

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
    md.validateLink = link_allowed  # type: ignore[method-assign,assignment]  # anything but http(s) stays text
    return md


_MD = _renderer()


def to_html(markdown: str) -> str:
    """The markdown as Matrix HTML (raw HTML in the text is escaped, not rendered)."""
    return _MD.render(markdown).strip()


def split_markdown(markdown: str, limit: int = MAX_CHUNK_CHARS) -> list[str]:
    """Pieces of at most ``limit`` characters, cut between paragraphs outside fences."""
    text = markdown.replace("\r\n", "\n").strip()
    if len(text) <= limit:
        return [text] if text else []
    pieces: list[str] = []
    current = ""
    for block in _blocks(text):
        for part in _fit(block, limit):
            if current and len(current) + 2 + len(part) > limit:
                pieces.append(current)
                current = ""
            current = f"{current}\n\n{part}" if current else part
    if current:
        pieces.append(current)
    return pieces


def _blocks(text: str) -> list[str]:
    """Paragraph-sized blocks; a fenced code block (blank lines and all) stays one block."""
    out: list[str] = []
    lines: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        if fence is None and not line.strip():
            if lines:
                out.append("\n".join(lines))
                lines = []
            continue
        lines.append(line)
    if lines:
        out.append("\n".join(lines))
    return out


def _fit(block: str, limit: int) -> list[str]:
    if len(block) <= limit:
        return [block]
    match = _FENCE.match(block)
    if match is None:
        return split_text(block, limit)
    fence = match.group(1)
    first, _, rest = block.partition("\n")
    body = rest.rsplit("\n", 1)[0] if rest.rstrip().endswith(fence) else rest
    room = max(1, limit - len(first) - len(fence) - 2)
    return [f"{first}\n{piece}\n{fence}" for piece in split_text(body, room)]


def message_content(markdown: str, *, msgtype: str, plain: bool = False) -> dict[str, Any]:
    """An ``m.room.message`` content for one piece: HTML unless ``plain`` (fixed text)."""
    if plain:
        return {"msgtype": msgtype, "body": markdown}
    return {"msgtype": msgtype, "body": to_plain(markdown) or markdown,
            "format": HTML_FORMAT, "formatted_body": to_html(markdown)}


def edit_content(event_id: str, new: dict[str, Any]) -> dict[str, Any]:
    """An edit of ``event_id`` that replaces its content with ``new`` (``m.replace``)."""
    content = {**new, "body": f"* {new['body']}", "m.new_content": new,
               "m.relates_to": {"rel_type": "m.replace", "event_id": event_id}}
    if "formatted_body" in new:
        content["formatted_body"] = f"* {new['formatted_body']}"
    return content


def reply_to(content: dict[str, Any], event_id: str | None) -> dict[str, Any]:
    """``content`` as a reply to ``event_id`` (a rich reply without the quoted fallback)."""
    if not event_id or not event_id.startswith("$"):
        return content
    return {**content, "m.relates_to": {"m.in_reply_to": {"event_id": event_id}}}
