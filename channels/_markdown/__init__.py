"""Markdown out, shared by the chat channels: parse once, render per platform, split once.

The model writes CommonMark (plus GFM tables and ``~~strike~~``). Regexes over that text
get the edges wrong (a URL holding ``)``, ``***x***``, emphasis across lines), so the text
is parsed with markdown-it-py and each channel renders the *tokens* in its own dialect.
No I/O here; a channel supplies a ``Dialect`` (inline markup) and turns ``Block``s into
``Unit``s (a head and tail that wrap every piece of the block, plus its lines).

The model, from the top::

    Block  a top-level block: "flow" (paragraphs, headings, lists, rules), "quote",
           "code" (fenced or indented) or "table"
    Line   one rendered line: inline tokens that balance on their own (a mark open across
           a line break is closed at the end of the line and reopened on the next), and
           its place in lists and quotes (indent, list marker, quote depth)
    Unit   what the splitter packs: head + (lead +) lines joined by "\\n" + tail

``pack`` is the one splitter: it fills chunks with whole units (blank line between),
breaks an over-long unit between its lines (repeating head, lead and tail, so a code block
is closed and reopened and a table keeps its header), and hard-cuts only a single line
longer than a chunk — inside a text token, never inside markup, with the marks closed
before the cut and reopened after. Telegram and Slack both measure in UTF-16 units.

Links are kept only for http(s) (``link_allowed``); any other scheme (``javascript:``,
``data:``, ``mailto:``, relative paths) is dropped and its text stays, as plain text.

Modules: ``parse`` (markdown to blocks and lines), ``inline`` (dialects, tables as grids,
plain text), ``split`` (units and the splitter).
"""

from __future__ import annotations

from lucidgate.channels._markdown.inline import PLAIN, Dialect, grid, plain_units, render_inline, to_plain, width
from lucidgate.channels._markdown.parse import Block, Line, blocks, fence_for, link_allowed, text_token
from lucidgate.channels._markdown.split import Unit, cut_line, pack, split_text, utf16_len

__all__ = [
    "PLAIN", "Block", "Dialect", "Line", "Unit", "blocks", "cut_line", "fence_for", "grid", "link_allowed",
    "pack", "plain_units", "render_inline", "split_text", "text_token", "to_plain", "utf16_len", "width",
]
