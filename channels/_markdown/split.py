"""The one splitter: ``Unit``s packed into chunks of at most a limit (package docstring)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from markdown_it.token import Token

from lucidgate.channels._markdown.parse import Line, text_token


@dataclass(frozen=True, slots=True)
class Unit:
    """A block ready to pack. ``head`` and ``tail`` wrap every piece of it (a code fence);
    ``lead`` lines open every piece (a table's header), unless they would take more than
    half a chunk — then they are shown once, like any other line."""

    lines: Sequence[Line]
    render: Callable[[Line], str | None]  # None: the line is not shown on this platform
    head: str = ""
    tail: str = ""
    lead: Sequence[Line] = ()


@dataclass(slots=True)
class _Packer:
    limit: int
    measure: Callable[[str], int]
    chunks: list[str] = field(default_factory=list)
    current: str = ""

    def room(self) -> int:
        return self.limit - (self.measure(self.current) + 2 if self.current else 0)

    def add(self, text: str) -> None:
        self.current = f"{self.current}\n\n{text}" if self.current else text

    def flush(self) -> None:
        if self.current.strip():
            self.chunks.append(self.current)
        self.current = ""


def pack(units: Iterable[Unit], limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Chunks of at most ``limit`` (as ``measure`` counts), each whole units or whole
    pieces of one (see the package docstring). Empty output for blank input."""
    packer = _Packer(limit, measure)
    for unit in units:
        rendered = [r for r in map(unit.render, [*unit.lead, *unit.lines]) if r is not None]
        whole = unit.head + "\n".join(rendered) + unit.tail
        if not whole.strip():
            continue
        if measure(whole) <= packer.room():
            packer.add(whole)
            continue
        if measure(whole) <= limit:
            packer.flush()
            packer.add(whole)
            continue
        _pack_lines(packer, unit)
    packer.flush()
    return packer.chunks


def _pack_lines(packer: _Packer, unit: Unit) -> None:
    measure = packer.measure
    lead = [r for r in map(unit.render, unit.lead) if r is not None]
    queue = list(reversed(unit.lines))
    if measure(unit.head + "\n".join(lead) + unit.tail) > packer.limit // 2:
        queue.extend(reversed(unit.lead))
        lead = []
    body: list[str] = []

    def piece(lines: list[str]) -> str:
        return unit.head + "\n".join([*lead, *lines]) + unit.tail

    while queue:
        line = queue.pop()
        shown = unit.render(line)
        if shown is None:
            continue
        if measure(piece([*body, shown])) <= packer.room():
            body.append(shown)
            continue
        if body:
            packer.add(piece(body))
            packer.flush()
            body = []
        elif packer.current:
            packer.flush()
        else:
            room = packer.limit - measure(piece([""]))
            parts = cut_line(line, unit.render, room, measure)
            if parts is None:
                body.append(shown)  # nothing left to cut: a lone over-long line
                continue
            queue.extend(reversed(parts))
            continue
        queue.append(line)
    if body:
        packer.add(piece(body))


def cut_line(line: Line, render: Callable[[Line], str | None], room: int,
             measure: Callable[[str], int]) -> tuple[Line, Line] | None:
    """Cut ``line`` in two, the first as long as fits ``room`` (at a space when one is in
    its second half); the second continues without the list marker."""
    text = "".join(t.content for t in line.tokens if t.type in _CUTTABLE)
    if len(text) < 2:
        return None

    def fits(at: int) -> bool:
        return measure(render(_split(line, at)[0]) or "") <= room

    lo, hi = 1, len(text) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    space = text.rfind(" ", lo // 2, lo)
    return _split(line, space + 1 if space > 0 else lo)


_CUTTABLE = ("text", "code_inline")


def _split(line: Line, at: int) -> tuple[Line, Line]:
    head: list[Token] = []
    tail: list[Token] = []
    stack: list[Token] = []
    seen = 0
    for tok in line.tokens:
        if seen >= at:
            tail.append(tok)
            continue
        if tok.type in _CUTTABLE and seen + len(tok.content) > at:
            keep = at - seen
            head.append(_with(tok, tok.content[:keep]))
            tail.extend([*stack, _with(tok, tok.content[keep:])])
            seen = at
            continue
        if tok.type in _CUTTABLE:
            seen += len(tok.content)
        if tok.nesting == 1:
            stack.append(tok)
        elif tok.nesting == -1 and stack:
            stack.pop()
        head.append(tok)
        if seen >= at:
            tail.extend(stack)
    rest_indent = line.indent + (len(line.marker) + 1 if line.marker else 0)
    return replace(line, tokens=tuple(head)), replace(line, tokens=tuple(tail), indent=rest_indent, marker="")


def _with(tok: Token, content: str) -> Token:
    copy = tok.copy()
    copy.content = content
    return copy


def split_text(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Plain text (not markdown) split by the same rules: paragraphs, lines, then words."""
    units = [Unit([Line((text_token(s),), "raw") for s in para.split("\n")], _raw)
             for para in text.replace("\r\n", "\n").split("\n\n")]
    return pack(units, limit, measure)


def _raw(line: Line) -> str:
    return line.tokens[0].content if line.tokens else ""


def utf16_len(text: str) -> int:
    """Length as Telegram and Slack count it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2
