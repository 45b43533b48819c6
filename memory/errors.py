"""Errors raised by the memory layer."""

from __future__ import annotations

from config.errors import LucidError


class MemoryStoreError(LucidError):
    """A memory file could not be read or written; the message says which and why."""
