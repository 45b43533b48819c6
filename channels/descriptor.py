"""What the core knows about a channel, said once: its ``ChannelDescriptor``.

Everything outside a channel's package that differs per channel lives here and nowhere
else: the type of its config section, how it is built, the hint the prompt gives the model
about how replies render, its outbox policy (how long a failing reply is retried), how often
a stranger is told "no", and whether it can stream. The registry builds channels from
descriptors, the composition root takes deadlines and the streaming set from them, the
context builder takes the hints and the gate the refusal interval — so adding a channel is
its package, its config section and one descriptor line in ``channels/registry.py``.

The refusal interval is one rule for every channel: a stranger is answered at most once per
ten minutes. Long enough that a chatty stranger (or two bots answering each other) costs one
message per interval, short enough that someone who comes back later learns why nobody
answers — which is what pairing needs. Slack used an hour; nothing about Slack justified
a different answer (its refusals go through the same limiter as every reply).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lucidgate.config.channel_schema import DeliverySection, StreamingSection
from lucidgate.config.section import Section

__all__ = ["REFUSAL_INTERVAL_S", "ChannelDescriptor", "sections"]

REFUSAL_INTERVAL_S = 600.0


@dataclass(frozen=True, slots=True)
class ChannelDescriptor:
    """One channel, as the core sees it.

    ``factory`` is the import string of ``build(config, deps: ChannelDeps)``, imported
    only when the channel is enabled; ``None`` for the channels a surface builds around itself
    (``cli`` behind the local API or ``lucid agent``). ``section`` is its config section's type:
    a ``DeliverySection`` (every channel's replies go through the outbox, retried until the
    section's ``deliveryDeadlineH``), and a ``StreamingSection`` when it can show a reply as it
    is written (then the section's ``streaming`` switch decides).
    """

    name: str
    section: type[Section]
    hint: str
    factory: str | None = None
    refusal_interval_s: float = REFUSAL_INTERVAL_S
    # How a user types one of our commands here: Slack's client takes every leading "/" as its own
    # slash command, so ours go through the app's one command, "/lucid <command>".
    command_syntax: str = "/{command}"

    def __post_init__(self) -> None:
        if not issubclass(self.section, DeliverySection):
            raise TypeError(f"channel {self.name!r}: its section {self.section.__name__} must be a "
                            "DeliverySection (the outbox needs its deliveryDeadlineH)")
        if self.refusal_interval_s <= 0:
            raise ValueError(f"channel {self.name!r}: refusal_interval_s must be positive")

    def command_text(self, command: str) -> str:
        """``command`` ("approve 4f2a") as a user of this channel types it."""
        return self.command_syntax.format(command=command)

    def of(self, channels: Section) -> Section:
        """This channel's section in ``config.channels``; a clear error when it has none."""
        section = sections(channels).get(self.name)
        if not isinstance(section, self.section):
            raise TypeError(f"config.channels has no {self.section.__name__} named {self.name!r}")
        return section

    def deadline_s(self, channels: Section) -> float:
        """How long the outbox retries a reply on this channel (the outbox policy)."""
        section = self.of(channels)
        assert isinstance(section, DeliverySection)  # checked at construction
        return section.delivery_deadline_h * 3600.0

    def streams(self, channels: Section) -> bool:
        """True when this channel can stream and its section switched streaming on."""
        section = self.of(channels)
        return isinstance(section, StreamingSection) and section.streaming


def sections(channels: Section) -> Mapping[str, Section]:
    """``config.channels`` by name: the typed sections, without reading attributes by string."""
    return {name: value for name, value in channels if isinstance(value, Section)}
