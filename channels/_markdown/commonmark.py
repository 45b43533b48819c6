"""The CommonMark-flavoured dialect that several platforms read as it is (Discord, DingTalk).

Their clients take ``**bold**``, ``*em*``, ``~~strike~~``, backtick code and ``[text](url)``
links, and differ only in which characters they treat as markup in plain text — so each
passes its own escape pattern and gets the same rendering of the rest: code spans fenced
with one more backtick than their longest run, and link targets with brackets and spaces
percent-encoded so the link cannot end early.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from markdown_it.token import Token

from lucidgate.channels._markdown.inline import Dialect, grid
from lucidgate.channels._markdown.parse import Block, Line, fence_for, text_token
from lucidgate.channels._markdown.split import Unit

_TICKS_RE = re.compile(r"`+")
_MARKUP = {"strong_open": "**", "em_open": "*", "s_open": "~~"}


def commonmark_dialect(escape: re.Pattern[str]) -> Dialect:
    """The dialect for a platform whose plain-text markup characters ``escape`` matches."""

    def text(value: str) -> str:
        return escape.sub(lambda m: "\\" + m.group(0), value)

    return Dialect(text=text, special=lambda tok: tok.markup or tok.content, code=_code,
                   open=_open, close=_close)


def _code(tok: Token) -> str:
    ticks = "`" * (max((len(run) for run in _TICKS_RE.findall(tok.content)), default=0) + 1)
    pad = " " if tok.content[:1] == "`" or tok.content[-1:] == "`" else ""
    return f"{ticks}{pad}{tok.content}{pad}{ticks}"


def _open(tok: Token) -> str:
    return "[" if tok.type == "link_open" else _MARKUP.get(tok.type, "")


def _close(tok: Token) -> str:
    if tok.type != "link_open":
        return _MARKUP.get(tok.type, "")
    href = str(tok.attrs.get("href", "")).replace("(", "%28").replace(")", "%29").replace(" ", "%20")
    return f"]({href})"


def fenced_unit(block: Block, line: Callable[[Line], str]) -> Unit:
    """A block as these platforms take it: code fenced as it came, a table as a text grid inside a
    fence (they render no tables), anything else line by line through the platform's ``line``."""
    if block.kind == "code":
        fence = fence_for([raw(ln) for ln in block.lines])
        return Unit(block.lines, raw, f"{fence}{block.lang}\n", f"\n{fence}")
    if block.kind == "table":
        rows = [Line((text_token(r),), "raw") for r in grid(block)]
        fence = fence_for([raw(r) for r in rows])
        return Unit(rows[2:], raw, f"{fence}\n", f"\n{fence}", lead=rows[:2])
    return Unit(block.lines, line)


def raw(line: Line) -> str:
    """A line's text as it stands (code, table rows): no markup rendering."""
    return line.tokens[0].content if line.tokens else ""
