"""Recall: a derived SQLite index over everything the assistant was told.

``MemoryIndex`` keeps ``memory/index.sqlite`` in step with the files, ``search`` answers
queries (keyword + vector, scoped per chat), ``RecallService`` runs both off the event loop
for the gateway, ``rebuild`` swaps in a fresh index atomically.

The names load on first use (PEP 562): the index and the ranking pull in numpy, which a
one-shot ``lucid agent -m`` that never searches should not pay for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.config.lazy import lazy_names

if TYPE_CHECKING:
    from lucidgate.memory.search.hits import Hit, Scope, SearchError, SearchSettings
    from lucidgate.memory.search.index import MemoryIndex
    from lucidgate.memory.search.query import search

__all__ = ["Hit", "MemoryIndex", "Scope", "SearchError", "SearchSettings", "search"]

_HOMES = {"Hit": "hits", "Scope": "hits", "SearchError": "hits", "SearchSettings": "hits",
          "MemoryIndex": "index", "search": "query"}

__getattr__ = lazy_names(__name__, _HOMES)
