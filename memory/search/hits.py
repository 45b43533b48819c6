"""What a recall search is asked and answers: scope, settings, hits, the query error.

Kept apart from ``query`` (the ranking, which needs numpy) so the prompt builder and the
tools can name these types without loading the search machinery; ``query`` is imported only
when a search actually runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lucidgate.config.schema import MemorySearchConfig
from lucidgate.memory.search.origin import TRUSTED, label


class SearchError(ValueError):
    """A query the index cannot answer (empty); the message says what to do."""


@dataclass(frozen=True, slots=True)
class Scope:
    """``session_key=None``: everything (the owner's private chat); else that chat only.
    ``trusted_only``: only chunks of the owner's own origin (``memory.search.origin``) —
    what auto-recall may put in front of a turn that holds the owner's tools."""

    session_key: str | None = None
    trusted_only: bool = False
    # The asking chat's live part (its key, first unarchived transcript line): already in
    # the prompt, so never worth a hit — and left in, the question finds itself first and
    # pushes every real hit down a scale that is relative to the best match.
    live_from: tuple[str, int] | None = None

    @classmethod
    def everything(cls) -> Scope:
        return cls(None)

    @classmethod
    def owner_trusted(cls, *, live_from: tuple[str, int] | None = None) -> Scope:
        return cls(None, trusted_only=True, live_from=live_from)

    def is_live(self, session_key: str | None, start_line: int | None) -> bool:
        """A chunk that starts inside the asking chat's live part."""
        return (self.live_from is not None and session_key == self.live_from[0]
                and start_line is not None and start_line >= self.live_from[1])


@dataclass(frozen=True, slots=True)
class SearchSettings:
    # Both sides are relative to the query's best match (``rank.fuse``), so they are on one
    # scale; meaning leads a little because it also finds what is said in other words.
    vector_weight: float = MemorySearchConfig.default_of("vector_weight")
    text_weight: float = MemorySearchConfig.default_of("text_weight")
    half_life_days: float = MemorySearchConfig.default_of("half_life_days")
    mmr_lambda: float = MemorySearchConfig.default_of("mmr_lambda")
    decay_floor: float = MemorySearchConfig.default_of("decay_floor")


@dataclass(frozen=True, slots=True)
class Hit:
    source: str
    path: str
    start_line: int | None
    end_line: int | None
    cursor: int | None
    session_key: str | None
    date: str | None
    score: float
    snippet: str
    text: str
    origin: str = "unknown"  # memory.search.origin
    chat_type: str | None = None

    @property
    def trusted(self) -> bool:
        return self.origin == TRUSTED

    def provenance(self) -> str:
        """Whose words these are, e.g. ``from a guest chat, telegram:42``."""
        return label(self.origin, self.session_key, self.chat_type)

    def where(self) -> str:
        if self.start_line is not None:
            return f"{self.path}:{self.start_line}-{self.end_line}"
        if self.cursor is not None:
            return f"{self.path} cursor {self.cursor}"
        return f"session {self.session_key}"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "start_line": self.start_line,
                "end_line": self.end_line, "cursor": self.cursor, "session_key": self.session_key,
                "date": self.date, "score": round(self.score, 4), "snippet": self.snippet,
                "origin": self.origin}

    def to_wire(self) -> dict[str, Any]:
        """``to_json`` with the score unrounded and the chat type added: what ``from_json``
        needs to rebuild a hit that prints (``where``, ``provenance``, score) like this one."""
        return {**self.to_json(), "score": self.score, "chat_type": self.chat_type}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Hit:
        """The hit ``to_json`` / ``to_wire`` described. Only the snippet travels, so ``text``
        is the snippet; raises ``KeyError``/``TypeError``/``ValueError`` on a malformed dict."""
        def opt_int(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        def opt_str(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        snippet = str(data["snippet"])
        return cls(str(data["source"]), str(data["path"]), opt_int("start_line"), opt_int("end_line"),
                   opt_int("cursor"), opt_str("session_key"), opt_str("date"), float(data["score"]),
                   snippet, snippet, origin=str(data.get("origin", "unknown")),
                   chat_type=opt_str("chat_type"))
