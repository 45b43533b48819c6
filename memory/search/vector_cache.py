"""The recall index's vectors in memory, kept current from a change log, not reloaded.

A search scores the query against every vector of the current model at once (one matrix
product), so the vectors live in memory as one float32 matrix. Reloading that matrix
whenever anything changed meant, at 10,000 chunks, about 40 ms of SQLite rows and Python
lists on every turn (a turn always adds a transcript window), growing with everything ever
said. Instead every writer appends to ``vector_log`` in the same transaction as its change:

    op 1  chunk ``chunk_id`` was added, or gained a vector (its text was embedded)
    op 0  chunk ``chunk_id`` was deleted
    op 2  anything may have changed (a reindex swap, vectors dropped): load everything

and a search applies only the entries after the last one it saw. Rows are appended to
a matrix with spare capacity and deleted rows are masked, so an update costs what changed.
The log is trimmed to its newest ``_rows.LOG_KEEP`` entries; a reader that fell further behind
(another process, idle for long) loads everything once, as at start.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from lucidgate.memory.search._rows import ADDED, DELETED, RESET

__all__ = ["VectorCache"]


class VectorCache:
    """The vectors of one (provider, model, dimension), with each row's chunk id, session
    key, source and origin; ``rows()`` and ``origins()`` give the live ones. Callers hold the
    index's lock."""

    def __init__(self, provider: str, model: str, dim: int) -> None:
        self.key = (provider, model, dim)
        self.seq: int | None = None  # the last log entry applied; None: never loaded
        self.full_loads = 0
        self._clear()

    def _clear(self) -> None:
        dim = self.key[2]
        self._row: dict[int, int] = {}
        self._n = 0
        self._ids = np.zeros(0, dtype=np.int64)
        self._keys = np.zeros(0, dtype=object)
        self._sources = np.zeros(0, dtype=object)
        self._origins = np.zeros(0, dtype=object)
        self._alive = np.zeros(0, dtype=bool)
        self._matrix = np.zeros((0, dim), dtype=np.float32)

    # -- reading -------------------------------------------------------------------------------
    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, session keys, sources, matrix) of the live rows."""
        live = np.flatnonzero(self._alive[:self._n])
        if len(live) == self._n:
            return self._ids[:self._n], self._keys[:self._n], self._sources[:self._n], \
                self._matrix[:self._n]
        return self._ids[live], self._keys[live], self._sources[live], self._matrix[live]

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, session keys, sources, origins, live, matrix) of every row, deleted ones
        included (``live`` says which are not): views, not copies, and ``live`` a snapshot.

        A search scores the whole matrix and masks the deleted rows rather than copying the
        live ones out: every turn replaces its chat's open window, so a memory in use always
        has a few deleted rows, and copying a 100k × 384 matrix (150 MB) to skip them cost
        more than the product itself. The views stay valid after the caller lets go of the
        index's lock: rows below ``len`` are never written again (appends go after them;
        growing, compacting and reloading make new arrays)."""
        n = self._n
        return (self._ids[:n], self._keys[:n], self._sources[:n], self._origins[:n],
                self._alive[:n].copy(), self._matrix[:n])

    def row_of(self, chunk_id: int) -> int | None:
        """The row (in ``columns()``) holding ``chunk_id``'s vector, if it has one."""
        return self._row.get(chunk_id)

    def origins(self) -> np.ndarray:
        """The origins of the live rows, in ``rows()`` order."""
        live = np.flatnonzero(self._alive[:self._n])
        return self._origins[:self._n] if len(live) == self._n else self._origins[live]

    def __len__(self) -> int:
        return len(self._row)

    # -- keeping current -----------------------------------------------------------------------
    def refresh(self, conn: sqlite3.Connection) -> None:
        """Apply the log entries written since the last refresh (one read snapshot)."""
        conn.execute("BEGIN")
        try:
            lo, hi = conn.execute("SELECT min(seq), max(seq) FROM vector_log").fetchone()
            if self.seq is not None and hi == self.seq:
                return
            behind = self.seq is None or (lo is not None and lo > self.seq + 1) \
                or (hi is not None and hi < self.seq)  # the log was recreated
            entries = [] if behind else conn.execute(
                "SELECT seq, chunk_id, op FROM vector_log WHERE seq > ? ORDER BY seq",
                (self.seq,)).fetchall()
            if behind or any(op == RESET for _, _, op in entries):
                self._load_all(conn)
            else:
                self._apply(conn, entries)
            self.seq = hi if hi is not None else 0
        finally:
            conn.execute("COMMIT")

    def _apply(self, conn: sqlite3.Connection, entries: list[tuple[int, int, int]]) -> None:
        last: dict[int, int] = {}
        for _, chunk_id, op in entries:
            last[chunk_id] = op  # a reused id deleted then added ends up added
        for chunk_id, op in last.items():
            if op == DELETED or chunk_id in self._row:
                self._drop(chunk_id)  # an added id already here: its row is read again
        added = [i for i, op in last.items() if op == ADDED]
        for start in range(0, len(added), 500):
            part = added[start:start + 500]
            marks = ",".join("?" * len(part))
            self._append(conn.execute(
                "SELECT c.id, c.session_key, c.source, v.vec, c.origin FROM chunks c JOIN vectors v "
                "ON v.hash = c.hash AND v.provider = ? AND v.model = ? AND v.dim = ? "
                f"WHERE c.id IN ({marks})", (*self.key, *part)).fetchall())
        if self._n and len(self._row) < self._n * 3 // 4:
            self._compact()

    def _load_all(self, conn: sqlite3.Connection) -> None:
        self.full_loads += 1
        self._clear()
        self._append(conn.execute(
            "SELECT c.id, c.session_key, c.source, v.vec, c.origin FROM chunks c JOIN vectors v "
            "ON v.hash = c.hash AND v.provider = ? AND v.model = ? AND v.dim = ?",
            self.key).fetchall())

    def _append(self, rows: list[tuple[int, str | None, str, bytes, str]]) -> None:
        if not rows:
            return
        dim = self.key[2]
        need = self._n + len(rows)
        if need > len(self._ids):
            self._grow(max(need + need // 4 + 64, 2 * len(self._ids)))  # amortised appends
        at = slice(self._n, need)
        self._matrix[at] = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32) \
            .reshape(len(rows), dim)
        self._ids[at] = [r[0] for r in rows]
        self._keys[at] = [r[1] for r in rows]
        self._sources[at] = [r[2] for r in rows]
        self._origins[at] = [r[4] for r in rows]
        self._alive[at] = True
        for offset, row in enumerate(rows):
            self._row[row[0]] = self._n + offset
        self._n = need

    def _drop(self, chunk_id: int) -> None:
        row = self._row.pop(chunk_id, None)
        if row is not None:
            self._alive[row] = False

    def _grow(self, capacity: int) -> None:
        def grown(old: np.ndarray) -> np.ndarray:
            new = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
            new[:self._n] = old[:self._n]
            return new

        self._ids, self._keys, self._sources, self._origins, self._alive, self._matrix = (
            grown(self._ids), grown(self._keys), grown(self._sources), grown(self._origins),
            grown(self._alive), grown(self._matrix))

    def _compact(self) -> None:
        live = np.flatnonzero(self._alive[:self._n])
        self._ids, self._keys, self._sources, self._origins, self._matrix = (
            self._ids[live], self._keys[live], self._sources[live], self._origins[live],
            self._matrix[live])
        self._alive = np.ones(len(live), dtype=bool)
        self._n = len(live)
        self._row = {int(cid): row for row, cid in enumerate(self._ids)}
