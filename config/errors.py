"""The root of lucidgate's small exception tree.

    LucidError                 anything lucidgate raises on purpose
    ├── ConfigError            the configuration is missing, unreadable or invalid
    ├── LLMError               (gateway.errors) the model could not answer
    │   └── ContextOverflowError
    ├── ToolError              (gateway.errors) a tool refused or failed; shown to the model
    ├── MemoryStoreError       (memory.errors) a memory file could not be read or written
    │   ├── GitStoreError      the memory repository could not be read or changed
    │   └── DreamBusy          a Dream is already running
    └── BudgetExceeded         (gateway.errors) a token budget is spent

Each error's message says what the user should do next.
"""

from __future__ import annotations


class LucidError(Exception):
    """Base class of every error lucidgate raises deliberately."""


class ConfigError(LucidError):
    """The configuration is invalid; the message names the key and the problem."""
