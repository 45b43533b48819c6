"""Small synchronous file helpers shared by the memory modules (call them off the loop)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)


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


def read_int_file(path: Path) -> int | None:
    """The non-negative integer stored in ``path``; None when missing, empty or corrupt."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("%s is unreadable (%s); treating it as missing", path, exc)
        return None
    if not text.isdigit():
        if text:
            logger.warning("%s does not hold a cursor (%r); treating it as missing", path, text[:40])
        return None
    return int(text)


def read_text_or_empty(path: Path) -> str:
    """The file's text, or "" when it does not exist (a fresh workspace)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
