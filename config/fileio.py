"""Atomic file writes shared by every package (config is the bottom floor).

A temp file in the same folder (``os.replace`` is only atomic within one filesystem),
fsynced, then renamed over the target: a crash leaves the old file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` via a temp file, so a crash leaves old or new.

    The temp file lives in the same folder (``os.replace`` is only atomic within one
    filesystem) and is removed if anything fails before the rename. ``durable=False``
    skips the fsync for files that can be rebuilt (``.cursor``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Like ``atomic_write_text`` for raw bytes (used to rewrite history.jsonl verbatim)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
