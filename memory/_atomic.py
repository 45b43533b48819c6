"""Small synchronous file helpers shared by the memory modules (call them off the loop)."""

from __future__ import annotations

import logging
from pathlib import Path

from config.fileio import atomic_write_bytes, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_text", "read_int_file", "read_text_or_empty"]

logger = logging.getLogger(__name__)


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
