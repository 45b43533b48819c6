"""Only close matches in "No such option" errors.

The parser (typer's copy of click) compares the mistyped option with every known one
*including the leading dashes*, so ``--bogus`` "resembles" ``--verbose`` (the shared ``--``
lifts the ratio over difflib's cutoff) and the error suggests an option the user never
meant. ``LucidGroup`` re-judges the suggestions on the names without their dashes, keeping
only real near-misses (``--verbos`` → ``--verbose``), or none.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from difflib import SequenceMatcher
from typing import Any

from typer._click.exceptions import NoSuchOption
from typer.core import TyperGroup

CUTOFF = 0.7


def close_options(typed: str, candidates: Sequence[str]) -> list[str]:
    """The ``candidates`` that are a near-miss for ``typed``, compared without dashes."""
    word = typed.lstrip("-")
    return [c for c in candidates if SequenceMatcher(None, word, c.lstrip("-")).ratio() >= CUTOFF]


@contextmanager
def _close_suggestions() -> Iterator[None]:
    try:
        yield
    except NoSuchOption as exc:
        exc.possibilities = close_options(exc.option_name, exc.possibilities or ())
        raise


class LucidGroup(TyperGroup):
    """The root group: parsing its own options and every subcommand's (made in ``invoke``)
    passes through here, so one place narrows the suggestions for all of them."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _close_suggestions():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _close_suggestions():
            return super().invoke(ctx)
