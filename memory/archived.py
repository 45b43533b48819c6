"""The stand-in for a session message that left the context (``memory.sessions``).

Once consolidation has archived a message, the session store keeps its position in
``Session.messages`` (indexes into the transcript stay valid) but not its dict: every archived
position holds this one shared, read-only marker, so a long chat's memory is its working set.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ARCHIVED", "is_archived"]


class _Archived(dict):  # type: ignore[type-arg]
    """The stand-in for a message that left the context: no role, no content, zero size."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("an archived message is not held in memory; read the transcript instead")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _refuse  # type: ignore[assignment]

    def __copy__(self) -> _Archived:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Archived:
        return self


# Shared by every archived position of every session. Carries the size caches (``_bytes``,
# ``_tok``) as zero, so a size sum that walks into the archived prefix never writes to it.
ARCHIVED: dict[str, Any] = _Archived({"_archived": True, "_bytes": 0, "_tok": 0})


def is_archived(message: dict[str, Any]) -> bool:
    return message is ARCHIVED
