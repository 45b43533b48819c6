"""Which agent an inbound message is for, and in which role (issue 41; DESIGN §1, §9).

The bus asks the ``Router`` once, when it accepts a message and before the message is
journalled (``MessageBus.publish_inbound``), so a message replayed after a restart keeps
its route. The answer is stamped on the message (``InboundMessage.agent``) and nothing
downstream routes again: each agent's loop takes only its own messages.

Bindings (``bindings`` in the config) match on ``channel``, ``account``, ``chat`` and
``sender``; every key a binding gives must match. When several match, the most specific
wins, in this order (then the first written):

    sender + chat  >  chat  >  sender  >  account  >  channel

so "this person in this group" beats "this group", which beats "this person anywhere",
which beats "this bot", which beats "this platform". A message no binding matches goes to
the default agent. Turns the gateway starts itself (a ``task``: reminders' tasks, the
heartbeat, an approval's outcome) carry their agent already and are left as they are.

Roles are per agent. The channel's gate stamped the sender's role for the channel; the
default agent keeps it. A non-default agent's owners are only the senders its entry lists
under ``owners`` for that channel: an owner of the channel is a guest there unless listed.
A listed sender becomes that agent's owner on channels whose sender ids the platform
vouches for (``PLATFORM_IDS``); where the caller names the sender itself (webhook, email,
the OpenAI endpoint, the local surfaces) the listing counts only for a sender the channel
already admitted as its owner, so naming someone's id never makes anyone an owner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from lucidgate.channels.messages import InboundMessage, Role
from lucidgate.config.agents_schema import Binding
from lucidgate.config.schema import Config

__all__ = ["PLATFORM_IDS", "Router", "specificity"]

# Channels whose sender id is the platform's account id, which the sender cannot choose.
PLATFORM_IDS = frozenset({"telegram", "slack", "discord", "matrix", "dingtalk"})


def specificity(binding: Binding) -> int:
    """How specific a binding is (higher wins): sender+chat 4, chat 3, sender 2, account 1, channel 0."""
    m = binding.match
    if m.sender and m.chat:
        return 4
    if m.chat:
        return 3
    if m.sender:
        return 2
    return 1 if m.account else 0


@dataclass(frozen=True, slots=True)
class _Rule:
    agent: str
    channel: str | None
    account: str | None
    chat: str | None
    sender: str | None

    def matches(self, msg: InboundMessage) -> bool:
        return all(want is None or want == got for want, got in (
            (self.channel, msg.channel), (self.account, msg.account),
            (self.chat, msg.chat_id), (self.sender, msg.sender_id)))


class Router:
    """The config's bindings and each agent's owners, read once when the gateway is built."""

    def __init__(self, config: Config) -> None:
        self.default = config.default_agent_id
        self.agents = tuple(config.agent_ids())
        ordered = sorted(enumerate(config.bindings), key=lambda ib: (-specificity(ib[1]), ib[0]))
        self._rules = tuple(_Rule(b.agent, b.match.channel, b.match.account, b.match.chat, b.match.sender)
                            for _, b in ordered)
        self._owners: dict[str, dict[str, frozenset[str]]] = {
            e.id: {ch: frozenset(str(s) for s in ids) for ch, ids in e.owners.items()}
            for e in config.agents.entries}

    @property
    def several(self) -> bool:
        return len(self.agents) > 1

    def agent_for(self, msg: InboundMessage) -> str:
        """The id of the agent ``msg`` goes to: the most specific binding's, else the default."""
        return next((rule.agent for rule in self._rules if rule.matches(msg)), self.default)

    def route(self, msg: InboundMessage) -> InboundMessage:
        """``msg`` stamped with its agent ("" for the default) and its role for that agent.
        A message that carries an agent already, or a gateway's own turn, is left as it is;
        one that names the default agent by its id (the console's chat pinned to it, the
        terminal's ``--agent``) is stamped "" without asking the bindings."""
        if msg.task is not None or not self.several:
            return msg
        if msg.agent:
            return replace(msg, agent="") if msg.agent == self.default else msg
        return self.route_to(msg, self.agent_for(msg))

    def route_to(self, msg: InboundMessage, agent: str) -> InboundMessage:
        """``msg`` stamped for the agent with id ``agent`` (the caller chose it: a session of
        that agent is named; "": the default agent), with the sender's role there. An unknown
        id is refused."""
        agent = agent or self.default
        if agent not in self.agents:
            raise ValueError(f"no agent {agent!r}")
        role = self.role_for(agent, msg)
        stamped = "" if agent == self.default else agent
        if stamped == msg.agent and role == msg.role:
            return msg
        return replace(msg, agent=stamped, role=role)

    def role_for(self, agent: str, msg: InboundMessage) -> Role:
        """The sender's role with ``agent`` (see the module docstring)."""
        listed = msg.sender_id in self._owners.get(agent, {}).get(msg.channel, frozenset())
        vouched = msg.channel in PLATFORM_IDS or msg.role == "owner"
        if agent == self.default:
            return "owner" if msg.role == "owner" or (listed and vouched) else "guest"
        return "owner" if listed and vouched else "guest"

    def owners(self, agent: str) -> Iterable[tuple[str, frozenset[str]]]:
        """An agent's own listed owners, by channel."""
        return self._owners.get(agent, {}).items()
