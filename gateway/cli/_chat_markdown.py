"""Answers in the terminal chat, rendered as chat markdown.

Its own module because markdown-it takes ~0.2 s to import: the interactive chat loads it with
the first answer, and every other command (and a one-shot ``-m``, which prints plain text)
never does.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from rich.markdown import Markdown


class ChatMarkdown(Markdown):
    """rich's Markdown read the way chat apps read a message: every newline breaks the line
    (``/help`` is one command per line) and inline HTML is shown as text, never dropped
    (``/dream-restore <sha>`` keeps its ``<sha>``)."""

    def __init__(self, markup: str) -> None:
        super().__init__(markup)
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = parser.parse(markup)
        for token in self.parsed:
            for child in token.children or ():
                if child.type == "softbreak":
                    child.type = "hardbreak"
