"""Replies to Telegram HTML: the channel's dialect of ``channels._markdown``.

Telegram's HTML mode accepts a handful of tags and insists they balance; anything else (an
unescaped ``<``, a stray tag) fails the whole message with "can't parse entities". Here the
HTML is written from markdown-it tokens, so it balances by construction: every text is
escaped, every tag opened is closed on the same line, and the shared splitter repeats a
block's wrapper (``<pre><code>``, ``<blockquote>``) around each piece of it.

Mapping: strong ``<b>``, em ``<i>``, strike ``<s>``, inline code ``<code>`` (outside other
marks: Telegram refuses code nested in them), fences ``<pre><code class="language-x">``,
http(s) links ``<a href>``, quotes ``<blockquote>``, headings bold, lists "• " / "1. " lines
indented by nesting, tables an aligned ``<pre>`` grid, rules a line.
"""

from __future__ import annotations

import html
import re
import sys
from functools import partial

from markdown_it.token import Token

from lucidgate.channels._markdown import (Block, Dialect, Line, Unit, blocks, grid, pack, render_inline,
                                          split_text, text_token, utf16_len)

MAX_MESSAGE_CHARS = 4096

_TAG = re.compile(r"<(/?)([a-z]+)[^>]*>")
_LANG = re.compile(r"[^\w+#-]")
_OPEN = {"strong_open": "<b>", "em_open": "<i>", "s_open": "<s>"}
_CLOSE = {"strong_open": "</b>", "em_open": "</i>", "s_open": "</s>", "link_open": "</a>"}


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _open(tok: Token) -> str:
    if tok.type == "link_open":
        return f'<a href="{html.escape(str(tok.attrs.get("href", "")))}">'
    return _OPEN[tok.type]


HTML = Dialect(
    text=_escape,
    special=lambda tok: _escape(tok.content),
    code=lambda tok: f"<code>{_escape(tok.content)}</code>",
    open=_open,
    close=lambda tok: _CLOSE[tok.type],
    code_outside_marks=True,
)


def render(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Markdown → Telegram HTML chunks, each at most ``limit`` UTF-16 units (Telegram's
    count) and each balanced on its own; none for blank text."""
    return pack((_unit(block) for block in blocks(text)), limit, utf16_len)


def markdown_to_html(text: str) -> str:
    """The whole text as one HTML string (no length limit)."""
    return "\n\n".join(render(text, sys.maxsize))


def split_plain(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Plain text (sent without parse mode) split on paragraphs, then lines, then words."""
    return split_text(text, limit, utf16_len)


def html_to_plain(text: str) -> str:
    """The text a chunk shows, without markup: the plain-text fallback."""
    return html.unescape(_TAG.sub("", text))


def _unit(block: Block) -> Unit:
    if block.kind == "code":
        lang = _LANG.sub("", block.lang)
        head = f'<pre><code class="language-{lang}">' if lang else "<pre><code>"
        return Unit(block.lines, _code_line, head, "</code></pre>")
    if block.kind == "table":
        rows = [Line((text_token(row),), "raw") for row in grid(block)]
        return Unit(rows[2:], _code_line, "<pre>", "</pre>", lead=rows[:2])
    if block.kind == "quote":
        return Unit(block.lines, partial(_line, base_quote=1), "<blockquote>", "</blockquote>")
    return Unit(block.lines, _line)


def _code_line(line: Line) -> str:
    return _escape(line.tokens[0].content) if line.tokens else ""


def _line(line: Line, base_quote: int = 0) -> str | None:
    if line.kind == "fence":
        return None  # code inside a list or quote shows as inline code, line by line
    # Telegram cannot nest quotes: deeper levels are marked by a bar
    prefix = "┃ " * max(0, line.quote - base_quote) + " " * line.indent
    if line.marker:
        prefix += ("•" if line.marker == "-" else line.marker) + " "
    if line.kind == "hr":
        return prefix + "——————"
    if line.kind == "code":
        content = line.tokens[0].content if line.tokens else ""
        return prefix + (f"<code>{_escape(content)}</code>" if content.strip() else _escape(content))
    if line.kind == "raw":
        return prefix + _code_line(line)
    return (prefix + render_inline(line.tokens, HTML, bold=line.heading > 0)).rstrip()
