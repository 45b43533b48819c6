"""What one session's worker holds, and what ``/stop`` may do about it.

A session's state lives in its keyed worker's slot (``SessionWork``), so it is made with the
session's queue and gone when the worker retires: nothing about a session outlives its work.
The worker records the item it has in hand (``InHand``) for exactly as long as it handles it;
a stop request is a flag on that item, never on the session, so a ``/stop`` that finds nothing
to stop cannot be left behind to swallow the next message.

``/stop`` reaches into the worker ahead of the session's queue and decides (``decide_stop``):

* a turn in hand — its model task is cancelled (or, while the turn is still starting, it is
  flagged and stops before the model is called);
* a command (``/dream``, ``/compact``) or the silent memory flush after a turn — nothing is
  cancelled (they write memory and end on their own); the reply says so;
* in a shared chat (group, channel, thread), a guest stops only a turn of their own; the
  owner stops anyone's.

A reminder's transcript line (``Note``) is an item of the session's queue: it is written
between turns, in order, by the worker, whether or not another message ever follows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from lucidgate.gateway.tools.turn import TurnContext

Kind = Literal["turn", "command", "flush"]


@dataclass(frozen=True, slots=True)
class Note:
    """A session worker's item: transcript lines written between turns (a sent reminder)."""

    lines: tuple[dict[str, Any], ...]


@dataclass(slots=True)
class InHand:
    """The item a session worker is handling now."""

    kind: Kind
    sender_id: str | None  # None until a resumed turn has read its sender back
    label: str = "a turn"
    task: asyncio.Task[Any] | None = None  # the turn's model task, once it runs
    stop_requested: bool = False


@dataclass(slots=True)
class SessionWork:
    """Per-session state, held in the session worker's slot."""

    in_hand: InHand | None = None


StopOutcome = Literal["stopping", "refused"]


def decide_stop(hand: InHand | None, ctx: TurnContext) -> tuple[StopOutcome, str]:
    """What a ``/stop`` from ``ctx``'s sender does to ``hand``; flags or cancels it when it
    stops, and returns the reply for the sender."""
    if hand is None or (hand.task is not None and hand.task.done()):
        return "refused", "Nothing is running right now."
    shared = ctx.chat_type != "private"
    if shared and not ctx.is_owner and hand.sender_id != ctx.sender_id:
        return "refused", "Nothing of yours is running; only the owner can stop someone else's answer."
    if hand.kind != "turn":
        return "refused", (f"Nothing to stop: {hand.label} is running and finishes on its own; "
                           "your next message is answered after it.")
    hand.stop_requested = True
    if hand.task is not None:
        hand.task.cancel()
    return "stopping", "Stopping…"
