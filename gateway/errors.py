"""Errors raised by the agent side (see the tree in ``config.errors``)."""

from __future__ import annotations

from lucidgate.config.errors import LucidError
from lucidgate.memory.errors import PromptTooLong


class LLMError(LucidError):
    """The model could not answer after our retries; the message is fit for the user.

    ``detail`` is the provider's own error text, shortened — logged, and shown to the owner.
    """

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class ContextOverflowError(LLMError, PromptTooLong):
    """The provider refused the prompt as too long for the model's context window."""


class ToolError(LucidError):
    """A tool refused or failed; the message is returned to the model as ``Error: ...``."""


class BudgetExceeded(LucidError):
    """A token budget (daily, per job) is spent; the job stops and says so."""
