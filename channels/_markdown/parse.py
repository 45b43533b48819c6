"""From markdown to ``Block``s and ``Line``s (see the package docstring); no rendering.

markdown-it's own link check is switched off so a ``[x](javascript:…)`` still parses as a
link (which the renderers then drop, keeping ``x``) instead of staying in the text as
literal brackets; raw HTML is off, so ``<b>`` in a reply is text like any other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

LineKind = Literal["inline", "code", "fence", "raw", "hr"]
_NOT_LANG = re.compile(r"[^\w+#.-]")


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # we drop links ourselves
    md.disable("text_join")  # keep escapes and entities as written (text_special tokens)
    return md


_MD = _parser()


def link_allowed(href: str) -> bool:
    """Only http(s) links with a host become links; everything else stays plain text."""
    try:
        parts = urlsplit(href.strip())
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


@dataclass(frozen=True, slots=True)
class Line:
    """One line of output. ``tokens`` are inline tokens (for "code"/"fence"/"raw" lines a
    single text token holding the line as written)."""

    tokens: tuple[Token, ...] = ()
    kind: LineKind = "inline"
    indent: int = 0  # spaces before the marker (or before the text when there is none)
    marker: str = ""  # "-" or "3." on the first line of a list item
    quote: int = 0  # blockquote depth
    heading: int = 0  # heading level, 0 for none


@dataclass(frozen=True, slots=True)
class Block:
    kind: Literal["flow", "quote", "code", "table"]
    lines: tuple[Line, ...] = ()
    lang: str = ""  # code: the fence's language
    rows: tuple[tuple[tuple[Token, ...], ...], ...] = ()  # table: header row first
    aligns: tuple[str, ...] = ()  # table: "left", "right", "center" or ""


def text_token(content: str) -> Token:
    return Token("text", "", 0, content=content)


def blocks(markdown: str) -> list[Block]:
    """The top-level blocks of ``markdown``, in order."""
    tokens = _MD.parse(markdown)
    out: list[Block] = []
    i = 0
    while i < len(tokens):
        end = _close(tokens, i)
        tok, inner = tokens[i], tokens[i + 1 : end]
        if tok.type in ("fence", "code_block"):
            lines = tuple(Line((text_token(s),), "code") for s in _code_lines(tok))
            out.append(Block("code", lines, _lang(tok)))
        elif tok.type == "table_open":
            out.append(_table(inner))
        elif tok.type == "blockquote_open":
            out.append(Block("quote", tuple(_flow(inner, 0, 1, gaps=True))))
        else:
            out.append(Block("flow", tuple(_flow(tokens[i : end + 1], 0, 0))))
        i = end + 1
    return out


def _close(tokens: Sequence[Token], i: int) -> int:
    """Index of the token closing ``tokens[i]`` (``i`` itself for a self-contained one)."""
    if tokens[i].nesting != 1:
        return i
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def _code_lines(tok: Token) -> list[str]:
    body = tok.content[:-1] if tok.content.endswith("\n") else tok.content
    return body.split("\n") if body else []


def _lang(tok: Token) -> str:
    """The fence's language, as a bare word: an info string may hold anything (even backticks
    after ``~~~``), which must not reach a backtick fence or an HTML attribute."""
    words = tok.info.split()
    return _NOT_LANG.split(words[0], maxsplit=1)[0] if words else ""


def fence_for(lines: Iterable[str]) -> str:
    """A backtick fence longer than any backtick run inside the code."""
    longest = 0
    for line in lines:
        stripped = line.lstrip()
        run = len(stripped) - len(stripped.lstrip("`"))
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _flow(tokens: Sequence[Token], indent: int, quote: int, *, gaps: bool = False) -> list[Line]:
    """Lines of a run of block tokens: paragraphs, headings, lists, quotes, code, rules.
    ``gaps``: a blank line between them (inside a quote, where it separates paragraphs)."""
    out: list[Line] = []
    i = 0
    while i < len(tokens):
        end = _close(tokens, i)
        tok, inner = tokens[i], tokens[i + 1 : end]
        if out and gaps:
            out.append(Line(quote=quote))
        if tok.type in ("paragraph_open", "heading_open"):
            level = int(tok.tag[1]) if tok.type == "heading_open" else 0
            for tokens_ in inline_lines(inner[0].children or [], join=bool(level)):
                out.append(Line(tokens_, indent=indent, quote=quote, heading=level))
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            for j in range(len(inner)):
                if inner[j].type == "list_item_open" and inner[j].level == tok.level + 1:
                    marker = f"{inner[j].info}{inner[j].markup}" if tok.type == "ordered_list_open" else "-"
                    item = _flow(inner[j + 1 : _close(inner, j)], indent + len(marker) + 1, quote)
                    if not item or item[0].marker or item[0].kind == "fence":  # the marker needs a line
                        item.insert(0, Line(indent=indent + len(marker) + 1, quote=quote))
                    item[0] = replace(item[0], indent=indent, marker=marker)
                    out.extend(item)
        elif tok.type == "blockquote_open":
            out.extend(_flow(inner, indent, quote + 1, gaps=True))
        elif tok.type in ("fence", "code_block"):
            code = _code_lines(tok)
            fence = fence_for(code)
            out.append(Line((text_token(fence + _lang(tok)),), "fence", indent, quote=quote))
            out.extend(Line((text_token(s),), "code", indent, quote=quote) for s in code)
            out.append(Line((text_token(fence),), "fence", indent, quote=quote))
        elif tok.type == "table_open":
            for row in _table(inner).rows:
                cells: list[Token] = []
                for n, cell in enumerate(row):
                    cells += ([text_token(" | ")] if n else []) + list(cell)
                out.append(Line(tuple(cells), indent=indent, quote=quote))
        elif tok.type == "hr":
            out.append(Line(kind="hr", indent=indent, quote=quote))
        i = end + 1
    return out


def _table(inner: Sequence[Token]) -> Block:
    rows: list[tuple[tuple[Token, ...], ...]] = []
    aligns: list[str] = []
    row: list[tuple[Token, ...]] = []
    for tok in inner:
        if tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open"):
            if tok.type == "th_open":
                aligns.append(str(tok.attrs.get("style", "")).removeprefix("text-align:"))
        elif tok.type == "inline":
            row.append(tuple(t for line in inline_lines(tok.children or [], join=True) for t in line))
        elif tok.type == "tr_close":
            rows.append(tuple(row))
    return Block("table", rows=tuple(rows), aligns=tuple(aligns))


def inline_lines(children: Sequence[Token], *, join: bool = False) -> list[tuple[Token, ...]]:
    """Inline tokens cut at line breaks (or, with ``join``, breaks made spaces); an image
    becomes a link around its alt text. Marks stay open across a break: the renderer
    closes what is open at the end of a line, and the next line starts by reopening it."""
    lines: list[tuple[Token, ...]] = []
    current: list[Token] = []
    stack: list[Token] = []
    for tok in _expand_images(children):
        if tok.type in ("softbreak", "hardbreak"):
            if join:
                current.append(text_token(" "))
                continue
            lines.append(tuple(current))
            current = list(stack)
            continue
        if tok.nesting == 1:
            stack.append(tok)
        elif tok.nesting == -1 and stack:
            stack.pop()
        current.append(tok)
    lines.append(tuple(current))
    return lines


def _expand_images(children: Iterable[Token]) -> Iterable[Token]:
    """An image as a link to it around its alt text: chat messages show no inline images."""
    for tok in children:
        if tok.type == "image":
            yield Token("link_open", "a", 1, attrs={"href": str(tok.attrs.get("src", ""))})
            yield from _expand_images(tok.children or [])
            yield Token("link_close", "a", -1)
        else:
            yield tok


