"""The message types that cross the bus (DESIGN §2).

Inbound messages are frozen values with a derived ``session_key``. Outbound messages are a
small union of typed kinds; nothing rides in a stringly-typed metadata dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ChatType = Literal["private", "group", "channel", "thread"]
# Who a sender is to the assistant. Decided by the gate that admits a message (``channels.gate``,
# or the transport that authenticated it) and carried on the message from then on.
Role = Literal["owner", "guest"]
CHAT_TYPES: tuple[ChatType, ...] = ("private", "group", "channel", "thread")


@dataclass(frozen=True, slots=True)
class ScheduledTask:
    """Marks an inbound message as a turn the scheduler started, not words a person typed.

    Only the scheduler builds one; channels never do. ``role`` is who the turn runs as: the
    role its creator had when scheduling it (the agent loop lowers it to guest if that
    sender is no longer an owner), or, for the gateway's own jobs (``internal``: the
    heartbeat), exactly as given. ``token_budget`` caps the tokens of that one turn.
    """

    job: str  # "task:7", "heartbeat": names the job in logs and the transcript
    role: Role = "guest"
    token_budget: int | None = None
    internal: bool = False


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message from a person (or a job) to the assistant. Ids are strings everywhere.

    ``role`` is the gate's decision about the sender, stamped where the message was admitted;
    nothing downstream recomputes it. A message built without one is a guest's: only a gate
    (or the authenticated local surfaces: the terminal, the console) makes an owner.
    """

    channel: str
    chat_id: str
    sender_id: str
    text: str
    chat_type: ChatType = "private"
    thread_id: str | None = None
    media: tuple[str, ...] = ()
    message_id: str | None = None
    sender_name: str | None = None
    # Internal sources (reminders, heartbeat) set this so no reply is forced on the user.
    silent: bool = False
    # Set by the scheduler for a scheduled task or a heartbeat turn (see ScheduledTask).
    task: ScheduledTask | None = None
    role: Role = "guest"
    # Who pays for a guest's turn when that is not the sender: an integration's credential
    # (``credential:<fingerprint>``), whose caller may name any sender it likes. None: the
    # sender on this channel pays.
    spender: str | None = None
    # The agent this message is for (``channels.routing``): decided once, when the bus accepts
    # it, and journalled with it. "" is the default agent, whose session keys stay unprefixed
    # so the sessions of a workspace from before several agents keep their names.
    agent: str = ""
    # The platform account (bot) it arrived on, for a channel serving several; None: its only one.
    account: str | None = None

    @property
    def session_key(self) -> str:
        key = f"{self.channel}:{self.chat_id}:{self.thread_id}" if self.thread_id else f"{self.channel}:{self.chat_id}"
        return f"{self.agent}:{key}" if self.agent else key

    @property
    def dedupe_id(self) -> str | None:
        """Platform-level identity used to drop redelivered messages."""
        if self.message_id is None:
            return None
        return f"{self.channel}:{self.chat_id}:{self.message_id}"

    @property
    def is_private(self) -> bool:
        return self.chat_type == "private"


@dataclass(frozen=True, slots=True)
class Target:
    """Where an outbound message goes."""

    channel: str
    chat_id: str
    thread_id: str | None = None
    reply_to: str | None = None

    @classmethod
    def of(cls, msg: InboundMessage) -> Target:
        return cls(msg.channel, msg.chat_id, msg.thread_id, msg.message_id)


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """The tokens a turn's model calls used in all (a turn may make several calls).

    Carried on the turn's answer for channels that report it to their caller (the
    OpenAI-compatible endpoint's ``usage``); defined here so channels need not know the model.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class OutboundText:
    target: Target
    text: str
    # The inbound message this answers (webhook waiters correlate on it).
    in_reply_to: str | None = None
    kind: Literal["text"] = "text"
    # Fixed text (a refusal from the config), delivered as written rather than as Markdown.
    plain: bool = False
    # Parts of a split reply the platform already accepted (set by the outbox on a retry).
    skip_parts: int = 0
    # The outbox's id for this item, the same on every attempt (receivers dedupe on it).
    delivery_id: str | None = None
    # Workspace-relative paths of files sent after the text (checked by the sender; see
    # ``channels.outfiles``). Each file counts as one more part for ``skip_parts``.
    files: tuple[str, ...] = ()
    # (label, command) pairs: a channel with buttons shows each under the text, and a press
    # arrives as that command sent by whoever pressed it (the gate decides their role). The
    # text itself must say how to send the commands: channels without buttons drop these.
    buttons: tuple[tuple[str, str], ...] = ()
    # The answering turn's summed token usage (None: not a model's answer, e.g. a command's).
    usage: TurnUsage | None = None
    # The agent that sent it ("" the default agent): ``files`` are named in its workspace.
    agent: str = ""


@dataclass(frozen=True, slots=True)
class OutboundTyping:
    """The turn is running: show a typing indicator."""

    target: Target
    kind: Literal["typing"] = "typing"


@dataclass(frozen=True, slots=True)
class OutboundProgress:
    """Partial text of an answer still being produced (streaming previews).

    ``activity`` names what the turn is doing instead of writing ("running grep…"); a
    channel shows it in its progress line and keeps ``text`` (the answer so far, possibly
    empty) as the preview.
    """

    target: Target
    text: str
    kind: Literal["progress"] = "progress"
    activity: str | None = None


@dataclass(frozen=True, slots=True)
class OutboundError:
    """A turn failed; ``text`` is a short message fit for the user."""

    target: Target
    text: str
    in_reply_to: str | None = None
    kind: Literal["error"] = "error"
    skip_parts: int = 0
    delivery_id: str | None = None


OutboundMessage = OutboundText | OutboundTyping | OutboundProgress | OutboundError


@dataclass(frozen=True, slots=True)
class SessionRef:
    """Where a session's messages come from and its answers go: kept in the session's
    metadata (``{"origin": {...}}``) so a turn resumed after a restart answers on its channel.

    The stored form is a plain JSON object with these four keys; ``from_stored`` reads it
    back (``None`` when absent or unusable), so files written before this type existed load
    unchanged.
    """

    channel: str
    chat_id: str
    chat_type: ChatType = "private"
    thread_id: str | None = None

    @classmethod
    def of(cls, msg: InboundMessage) -> SessionRef:
        return cls(msg.channel, msg.chat_id, msg.chat_type, msg.thread_id)

    @classmethod
    def from_stored(cls, metadata: Mapping[str, Any]) -> SessionRef | None:
        """The origin in a session's ``metadata``, or None when it has none (or a broken one)."""
        origin = metadata.get("origin")
        if not isinstance(origin, Mapping) or not origin.get("channel") or origin.get("chat_id") is None:
            return None
        # Missing: a private chat (as every reader took it); unknown: not a private one.
        chat_type = origin.get("chat_type") or "private"
        thread_id = origin.get("thread_id")
        return cls(str(origin["channel"]), str(origin["chat_id"]),
                   chat_type if chat_type in CHAT_TYPES else "group",
                   str(thread_id) if thread_id is not None else None)

    def stored(self) -> dict[str, Any]:
        """The JSON form kept in the session's metadata under ``origin``."""
        return {"channel": self.channel, "chat_id": self.chat_id, "chat_type": self.chat_type,
                "thread_id": self.thread_id}
