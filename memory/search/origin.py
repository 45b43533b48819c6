"""Whose words a recall chunk holds: its origin, and how a hit says so.

    owner    the owner's memory files and notes, and the owner's private chats and their history
    guest    anyone else's chat, and any group chat (the owner's words there are mixed with others')
    tool     an automated run with no person in it (the heartbeat)
    import   history and transcripts brought in by ``lucid import``
    unknown  provenance not recorded (treated like a guest's)

Only ``owner`` is trusted: auto-recall in an owner's turn reads nothing else, and an explicit
search labels every other hit with where it came from, so the model reads it as someone
else's material rather than the owner's instructions.
"""

from __future__ import annotations

__all__ = ["IMPORTED_PREFIX", "INTERNAL_CHANNELS", "ORIGINS", "TRUSTED", "label", "origin_of"]

TRUSTED = "owner"
ORIGINS = ("owner", "guest", "tool", "import", "unknown")
IMPORTED_PREFIX = "import:"  # session key of history entries brought in by an import
INTERNAL_CHANNELS = frozenset({"heartbeat"})


def origin_of(session_key: str | None, channel: str | None, owner: bool | None, *,
              imported: bool = False) -> str:
    """The origin of a history entry or transcript window (``owner``: None when unrecorded)."""
    if session_key is not None and session_key.startswith(IMPORTED_PREFIX):
        return "import"
    if owner:
        return "owner"
    if imported:
        return "import"
    if (channel or (session_key or "").split(":", 1)[0]) in INTERNAL_CHANNELS:
        return "tool"
    return "guest" if owner is False else "unknown"


def label(origin: str, session_key: str | None, chat_type: str | None) -> str:
    """``from a guest chat, telegram:42`` (or ``a group chat``): said beside every hit that is not the owner's."""
    where = session_key or "no session"
    if origin == TRUSTED:
        return "the owner's"
    if origin == "guest":
        kind = "guest" if chat_type in (None, "private") else chat_type
        return f"from a {kind} chat, {where}"
    if origin == "tool":
        return f"from an automated run, {where}"
    if origin == "import":
        return f"from an import, {where}"
    return f"of unknown origin, {where}"
