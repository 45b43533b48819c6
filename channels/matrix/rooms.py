"""Whether a Matrix room is the owner's private chat: decided once, from facts a stranger cannot change.

A room is private only when both hold:

* it is a direct chat with one person: they invited the bot with ``is_direct`` (recorded
  when the invite arrives), or they created the room;
* nobody but the bot and that person has ever been a member. A room's state keeps one
  ``m.room.member`` event per user who ever had a membership — joined, invited, left,
  banned, knocked — so a guest who came and went is still there to see.

So the owner's private chat is one only the owner ever shared with the bot, and a guest's
direct chat stops being private the moment anyone else (the owner included) is in it.

Every other room is shared. The member count is never consulted: a guest who leaves lowers it.
Decisions are kept in ``state/matrix-rooms.json`` and only ever move from private to shared:
a room once shared stays shared after a restart, and a private room becomes shared for good
at the first sign of a third person (a member event in a sync, a message from someone else).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

Kind = Literal["private", "shared"]


def rooms_path(workspace: Path) -> Path:
    return Path(workspace) / "state" / "matrix-rooms.json"


def decide(state: Iterable[Mapping[str, Any]], *, bot: str,
           direct_from: str | None) -> tuple[Kind, str | None]:
    """``("private", person)`` or ``("shared", None)`` from a room's full state events.

    ``direct_from``: who brought the bot in with an ``is_direct`` invite, if anyone did."""
    creator, members, invited_elsewhere = None, set(), False
    for event in state:
        kind = event.get("type")
        if kind == "m.room.create":
            creator = event.get("sender")
        elif kind == "m.room.member" and isinstance(event.get("state_key"), str):
            members.add(event["state_key"])
        elif kind == "m.room.third_party_invite":
            invited_elsewhere = True  # someone invited by e-mail: a third person
    partner = direct_from or creator
    if not isinstance(partner, str) or creator is None or invited_elsewhere \
            or not {creator, *members} <= {bot, partner}:
        return "shared", None
    return "private", partner


class RoomKinds:
    """The persisted decisions (room id -> private with whom, or shared) and direct invites."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rooms: dict[str, dict[str, str]] = {}
        self.direct_invites: dict[str, str] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            # Unreadable: every room is decided again from its state (a private one may turn
            # shared, never the other way, since the state only grows).
            logger.warning("%s is unreadable; Matrix rooms are decided again from their state", path)
            return
        rooms, invites = data.get("rooms"), data.get("direct_invites")
        if isinstance(rooms, dict):
            self.rooms = {k: v for k, v in rooms.items()
                          if isinstance(v, dict) and v.get("kind") in ("private", "shared")}
        if isinstance(invites, dict):
            self.direct_invites = {k: v for k, v in invites.items() if isinstance(v, str)}

    def kind(self, room_id: str) -> Kind | None:
        entry = self.rooms.get(room_id)
        return None if entry is None else ("private" if entry["kind"] == "private" else "shared")

    def partner(self, room_id: str) -> str | None:
        """The person a private room is with."""
        entry = self.rooms.get(room_id) or {}
        return entry.get("with") if entry.get("kind") == "private" else None

    def settle(self, room_id: str, kind: Kind, partner: str | None) -> None:
        if self.kind(room_id) == "shared":
            return  # shared for good
        self.rooms[room_id] = {"kind": "private", "with": partner or ""} if kind == "private" \
            else {"kind": "shared"}
        if kind == "shared":
            logger.info("Matrix room %s is a shared room", room_id)

    def third_party(self, room_id: str, users: Iterable[str], bot: str) -> bool:
        """Whether ``users`` (members seen in the room) include anyone but the bot and the
        private room's person; marks the room shared when they do."""
        partner = self.partner(room_id)
        if partner is None:
            return False
        others = set(users) - {bot, partner}
        if others:
            self.settle(room_id, "shared", None)
            return True
        return False

    def note_direct_invite(self, room_id: str, inviter: str) -> None:
        self.direct_invites[room_id] = inviter

    async def save(self) -> None:
        data = {"rooms": self.rooms, "direct_invites": self.direct_invites}
        try:
            await asyncio.to_thread(self._write, json.dumps(data, sort_keys=True))
        except OSError:
            logger.exception("could not save the Matrix room decisions to %s", self.path)

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, text)
