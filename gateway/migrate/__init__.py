"""Moving an assistant in and out: nanobot and OpenClaw importers, lucid export/import.

Readers turn a foreign layout into a ``Source`` (``model.py``); ``apply.import_source`` is
the one writer (merge, never overwrite; idempotent); ``archive.py`` is the export format.
"""

from lucidgate.gateway.migrate.apply import ImportReport, import_source, merge_markdown
from lucidgate.gateway.migrate.model import HistoryItem, SessionItem, Source

__all__ = ["HistoryItem", "ImportReport", "SessionItem", "Source", "import_source", "merge_markdown"]
