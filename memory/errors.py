"""Errors raised by the memory layer.

    MemoryStoreError        a memory file could not be read or written
    ├── GitStoreError       versioning failed (unknown commit, broken repo, lock held)
    └── DreamBusy           another Dream holds the workspace's Dream lock
    PromptTooLong           the model refused a request as too long for its window (the
                            gateway's ContextOverflowError is one); memory splits and retries
"""

from __future__ import annotations

from lucidgate.config.errors import LucidError


class MemoryStoreError(LucidError):
    """A memory file could not be read or written; the message says which and why."""


class GitStoreError(MemoryStoreError):
    """Versioning the memory files failed (unknown commit, broken repository, lock held)."""


class PromptTooLong(LucidError):
    """A request did not fit the model's context window; a smaller one may."""


class DreamBusy(MemoryStoreError):
    """A Dream is already running for this workspace (here or in another lucid process)."""

    def __init__(self, message: str = "a Dream is already running; try again when it finishes") -> None:
        super().__init__(message)
