"""Who may talk to the assistant (DESIGN §9): exact, string-typed allow-lists.

An empty ``allowFrom`` denies everyone but the owners. Ids match exactly; ``@username``
entries match the sender's username case-insensitively (discouraged: usernames change
hands). Nothing is ever split on a separator.
"""

from __future__ import annotations

from collections.abc import Iterable


class AccessPolicy:
    def __init__(self, allow_from: Iterable[str], owners: Iterable[str]) -> None:
        entries = [str(e).strip() for e in allow_from if str(e).strip()]
        self._ids = frozenset(e for e in entries if not e.startswith("@"))
        self._usernames = frozenset(e[1:].lower() for e in entries if e.startswith("@"))
        self._owners = frozenset(str(o).strip() for o in owners if str(o).strip())

    def is_owner(self, sender_id: str) -> bool:
        return str(sender_id) in self._owners

    def allows(self, sender_id: str, username: str | None = None) -> bool:
        sender_id = str(sender_id)
        if sender_id in self._owners or sender_id in self._ids:
            return True
        if not username:
            return False
        return username.lstrip("@").lower() in self._usernames
