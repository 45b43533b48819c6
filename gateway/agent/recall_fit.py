"""Fitting auto-recalled hits into a turn's prompt: skip what the prompt already holds, cut
the rest to the recall token budget."""

from __future__ import annotations

import re

from lucidgate.memory import tokens
from lucidgate.memory.search.when import without_stamp


async def within(candidates: list[str], budget: int) -> list[str]:
    """The recall lines that fit ``budget`` tokens, the last one cut to fit."""
    await tokens.ready()
    lines: list[str] = []
    for line in candidates:
        cost = tokens.count_text(line)
        if cost > budget:
            line = line[: max(0, budget * 3)] + "…"
            cost = tokens.count_text(line)
            if cost > budget or budget < 20:
                break
        budget -= cost
        lines.append(line)
    return lines


_SAID = re.compile(r"^(?:user|assistant|\[(?:owner|guest[^\]\n]*)\]): ")


def already_in(text: str, prompt: str) -> bool:
    """Every line of a hit (transcript lines without their ``role:`` or speaker prefix, the
    hit without its date line) is in the prompt."""
    lines = [_SAID.sub("", line, count=1)
             for line in (raw.strip() for raw in without_stamp(text).splitlines())]
    return all(line.rstrip("…") in prompt for line in lines if line)
