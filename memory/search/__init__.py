"""Recall: a derived SQLite index over everything the assistant was told (issue 10).

``MemoryIndex`` keeps ``memory/index.sqlite`` in step with the files, ``search`` answers
queries (keyword + vector, scoped per chat), ``RecallService`` runs both off the event loop
for the gateway, ``rebuild`` swaps in a fresh index atomically.
"""

from memory.search.index import MemoryIndex
from memory.search.query import Hit, Scope, SearchError, SearchSettings, search

__all__ = ["Hit", "MemoryIndex", "Scope", "SearchError", "SearchSettings", "search"]
