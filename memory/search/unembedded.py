"""Which chunks still need a vector, found from the change log instead of a full scan.

``embed_missing`` runs after every sync, and a sync follows every turn. Finding the chunks
without a vector by joining every chunk against the vector cache reads the whole chunk
table: at 100k windows half a second (more on a busy machine) to learn that one new
window needs embedding. Every chunk that is added, or gains a vector, is written to
``vector_log`` (``_rows``) in the transaction that adds it, so after one full scan a chunk
can lack a vector only if it was lacking one then (held back, left over by a limit or a
failing embedder) or it was logged since. Only those few are checked. Anything the log
cannot vouch for — the first pass, a log trimmed past what was seen, a reset (vectors
dropped, the model changed), another model — falls back to the full scan, which is always
correct.
"""

from __future__ import annotations

import sqlite3

from lucidgate.memory.search._rows import ADDED, RESET

__all__ = ["Unembedded"]

_BATCH = 500


class Unembedded:
    """The chunks of one index that may lack a vector for (provider, model). Callers hold
    the index's lock; a reopened index file needs a new instance."""

    def __init__(self) -> None:
        self.seq: int | None = None  # the log entry the last pass had seen
        self.key: tuple[str, str] | None = None
        self.pending: set[int] = set()  # lacking a vector at the last pass
        self.full_scans = 0

    def missing(self, conn: sqlite3.Connection, provider: str,
                model: str) -> list[tuple[int, str, str]]:
        """(chunk id, hash, text) of every chunk without a vector for the model, in one
        read snapshot."""
        conn.execute("BEGIN")
        try:
            lo, hi = conn.execute("SELECT min(seq), max(seq) FROM vector_log").fetchone()
            since = self._since(conn, (provider, model), lo, hi)
            if since is None:
                self.full_scans += 1
                rows = conn.execute(
                    "SELECT c.id, c.hash FROM chunks c LEFT JOIN vectors v ON v.hash = c.hash "
                    "AND v.provider = ? AND v.model = ? WHERE v.hash IS NULL", (provider, model)).fetchall()
            else:
                rows = self._check(conn, provider, model, sorted(self.pending | since))
            found = self._texts(conn, rows)
        finally:
            conn.execute("COMMIT")
        self.seq, self.key = (hi if hi is not None else 0), (provider, model)
        self.pending = {cid for cid, _, _ in found}
        return found

    def _since(self, conn: sqlite3.Connection, key: tuple[str, str], lo: int | None,
               hi: int | None) -> set[int] | None:
        """Chunks logged as added since the last pass; None when only a full scan will do."""
        if self.seq is None or self.key != key or (hi is not None and hi < self.seq) \
                or (lo is not None and lo > self.seq + 1):
            return None
        since: set[int] = set()
        for chunk_id, op in conn.execute("SELECT chunk_id, op FROM vector_log WHERE seq > ?", (self.seq,)):
            if op == RESET:
                return None
            if op == ADDED:
                since.add(chunk_id)
        return since

    @staticmethod
    def _check(conn: sqlite3.Connection, provider: str, model: str,
               ids: list[int]) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for start in range(0, len(ids), _BATCH):
            part = ids[start:start + _BATCH]
            out += conn.execute(
                "SELECT c.id, c.hash FROM chunks c LEFT JOIN vectors v ON v.hash = c.hash "
                f"AND v.provider = ? AND v.model = ? WHERE v.hash IS NULL AND c.id IN "
                f"({','.join('?' * len(part))})", (provider, model, *part)).fetchall()
        return out

    @staticmethod
    def _texts(conn: sqlite3.Connection, rows: list[tuple[int, str]]) -> list[tuple[int, str, str]]:
        """The rows with their texts, in id order (read only for the few that need them)."""
        ids = sorted(cid for cid, _ in rows)
        out: list[tuple[int, str, str]] = []
        for start in range(0, len(ids), _BATCH):
            part = ids[start:start + _BATCH]
            out += conn.execute(f"SELECT id, hash, text FROM chunks WHERE id IN ({','.join('?' * len(part))}) "
                                "ORDER BY id", part).fetchall()
        return out
