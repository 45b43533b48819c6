"""Inline rendering in a platform's ``Dialect``, tables as text grids, plain text."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from markdown_it.token import Token

from lucidgate.channels._markdown.parse import Block, Line, blocks, link_allowed, text_token
from lucidgate.channels._markdown.split import Unit, pack

_MARKS = ("strong", "em", "s", "link")


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a platform writes inline markup. ``open``/``close`` get the opening token of
    strong, em, s and (allowed) links; ``text`` escapes plain text."""

    text: Callable[[str], str]
    special: Callable[[Token], str]  # an escape or entity (text_special)
    code: Callable[[Token], str]
    open: Callable[[Token], str]
    close: Callable[[Token], str]
    code_outside_marks: bool = False  # Telegram: <code> may not sit inside <b>, <i>, <s>, <a>


def render_inline(tokens: Iterable[Token], dialect: Dialect, *, bold: bool = False) -> str:
    """Balanced by construction: marks open lazily (just before the text they cover) and
    everything still open is closed at the end. ``bold`` wraps the whole line in strong
    (a heading) and drops strong inside it."""
    out: list[str] = []
    wanted: list[Token] = [Token("strong_open", "strong", 1, markup="**")] if bold else []
    shown: list[Token] = []
    dropped = 0  # links being dropped (their closers are skipped too)

    def close_from(n: int) -> None:
        while len(shown) > n:
            out.append(dialect.close(shown.pop()))

    def sync() -> None:
        common = 0
        while common < len(shown) and common < len(wanted) and shown[common] is wanted[common]:
            common += 1
        close_from(common)
        for tok in wanted[common:]:
            out.append(dialect.open(tok))
            shown.append(tok)

    for tok in tokens:
        kind = tok.type.rsplit("_", 1)[0] if tok.nesting else tok.type
        if kind not in _MARKS and tok.nesting:
            continue
        if bold and kind == "strong":
            continue
        if tok.nesting == 1:
            if kind == "link" and not link_allowed(str(tok.attrs.get("href", ""))):
                dropped += 1
            else:
                wanted.append(tok)
        elif tok.nesting == -1:
            if kind == "link" and dropped:
                dropped -= 1
                continue
            at = next((n for n in range(len(wanted) - 1, -1, -1) if wanted[n].type == f"{kind}_open"), None)
            if at is None:
                continue
            opener = wanted.pop(at)
            # Token is a dataclass: == compares fields, so find the very opener by identity
            where = next((n for n, t in enumerate(shown) if t is opener), None)
            if where is not None:
                close_from(where)
        elif tok.type == "code_inline":
            in_link = any(t.type == "link_open" for t in wanted)
            if dialect.code_outside_marks and in_link:
                sync()
                out.append(dialect.text(tok.content))
            elif dialect.code_outside_marks:
                close_from(0)
                out.append(dialect.code(tok))
            else:
                sync()
                out.append(dialect.code(tok))
        elif tok.type in ("text", "text_special"):
            if not tok.content:
                continue
            sync()
            out.append(dialect.special(tok) if tok.type == "text_special" else dialect.text(tok.content))
    close_from(0)
    return "".join(out)


PLAIN = Dialect(text=lambda s: s, special=lambda t: t.content, code=lambda t: t.content,
                open=lambda t: "", close=lambda t: "")


# -- tables -----------------------------------------------------------------------------
def width(text: str) -> int:
    """Columns a string takes in a monospaced font (CJK and fullwidth count two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1
               for c in text)


def grid(block: Block) -> list[str]:
    """A table as aligned plain-text rows, a rule under the header."""
    rows = [[render_inline(cell, PLAIN) for cell in row] for row in block.rows]
    columns = max((len(r) for r in rows), default=0)
    rows = [r + [""] * (columns - len(r)) for r in rows]
    widths = [max(width(r[c]) for r in rows) for c in range(columns)]
    aligns = list(block.aligns) + [""] * columns

    def cell(text: str, col: int) -> str:
        pad = widths[col] - width(text)
        if aligns[col] == "right":
            return " " * pad + text
        if aligns[col] == "center":
            return " " * (pad // 2) + text + " " * (pad - pad // 2)
        return text + " " * pad

    lines = [" | ".join(cell(t, c) for c, t in enumerate(r)).rstrip() for r in rows]
    if lines:
        lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


def plain_line(line: Line) -> str | None:
    """A line as plain text (list bullets as "•"); fence lines are not shown."""
    if line.kind == "fence":
        return None
    prefix = "> " * line.quote + " " * line.indent + (_bullet(line.marker) + " " if line.marker else "")
    if line.kind == "hr":
        return prefix + "———"
    return (prefix + render_inline(line.tokens, PLAIN)).rstrip()


def _bullet(marker: str) -> str:
    return "•" if marker == "-" else marker


def plain_units(markdown: str) -> list[Unit]:
    units: list[Unit] = []
    for block in blocks(markdown):
        if block.kind == "table":
            units.append(Unit([Line((text_token(r),), "raw") for r in grid(block)], plain_line))
        else:
            units.append(Unit(block.lines, plain_line))
    return units


def to_plain(markdown: str) -> str:
    """What the markdown shows, as plain text (a fallback and a notification preview)."""
    return "\n\n".join(pack(plain_units(markdown), limit=1 << 62))
