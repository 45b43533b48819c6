"""Which channels exist (one ``ChannelDescriptor`` each), and building the enabled ones.

A registry of descriptors rather than an ``if`` chain per platform: a channel's package
(and its SDK) is imported only when the channel is enabled, through the ``build(config,
deps) -> Channel`` factory its descriptor names (``deps``: the ``ChannelDeps`` the root built,
``channels/deps.py``); a factory that cannot work with its section (no token…) raises
``ChannelUnavailable`` saying what to set.
The rest of the core (the outbox deadlines, the streaming set, the prompt's format hints,
the gate's refusal interval) reads the same descriptors. Adding a channel is one package,
its config section and one line in ``CHANNELS``.

Building is forgiving per channel and strict overall: one line is logged for every enabled
channel — started, or refused and why ("telegram: no token — disabled") — and a channel
that cannot be built never stops the others.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Mapping

from lucidgate.channels.base import Channel, ChannelUnavailable, SharesIntakeLimits
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.descriptor import ChannelDescriptor, sections
from lucidgate.config.channel_schema import SwitchedSection
from lucidgate.config.errors import LucidError
from lucidgate.config.schema import (CliChannelConfig, Config, DingTalkConfig, DiscordConfig, EmailConfig, MatrixConfig,
                                     OpenAIApiConfig, SlackConfig, TelegramConfig, WebChannelConfig, WebhookConfig)

logger = logging.getLogger(__name__)

__all__ = ["CHANNELS", "ChannelDescriptor", "ChannelUnavailable", "build_channels", "channel_hints", "command_text",
           "delivery_deadlines", "descriptor", "enabled_channels", "load_factory", "streaming_channels"]

_D = ChannelDescriptor
CHANNELS: dict[str, ChannelDescriptor] = {d.name: d for d in (
    _D("telegram", TelegramConfig, "Replies render as Telegram messages: short paragraphs, simple markdown, "
       "no tables.", "lucidgate.channels.telegram:build"),
    _D("slack", SlackConfig, "Replies render in Slack: simple markdown, no tables.", "lucidgate.channels.slack:build",
       command_syntax="/lucid {command}"),
    _D("discord", DiscordConfig, "Replies render in Discord: simple markdown, no tables.",
       "lucidgate.channels.discord:build"),
    _D("matrix", MatrixConfig, "Replies render in a Matrix client: markdown becomes HTML (tables and code "
       "blocks work).", "lucidgate.channels.matrix:build"),
    _D("email", EmailConfig, "Replies are sent as plain-text email: write like a letter, light markdown "
       "(lists, emphasis) reads fine, no tables.", "lucidgate.channels.email:build"),
    _D("dingtalk", DingTalkConfig, "Replies render in DingTalk: simple markdown (headings, bold, lists, links), "
       "no tables.", "lucidgate.channels.dingtalk:build"),
    _D("webhook", WebhookConfig, "Replies go to an HTTP client: plain text unless asked otherwise.",
       "lucidgate.channels.webhook:build"),
    _D("openai", OpenAIApiConfig, "Replies are chat completions read by another program or its user: "
       "markdown unless asked otherwise.", "lucidgate.channels.openai:build"),
    _D("web", WebChannelConfig, "Replies render as markdown in a web page.", "lucidgate.channels.web:build"),
    _D("cli", CliChannelConfig, "Replies print in a terminal: plain text or light markdown."),
)}


def descriptor(name: str) -> ChannelDescriptor | None:
    """The descriptor of channel ``name`` (``None`` for one the registry does not know)."""
    return CHANNELS.get(name)


def delivery_deadlines(config: Config, registry: Mapping[str, ChannelDescriptor] | None = None
                       ) -> dict[str, float]:
    """Every channel's outbox deadline in seconds, from its section."""
    return {name: d.deadline_s(config.channels) for name, d in (registry or CHANNELS).items()}


def streaming_channels(config: Config, registry: Mapping[str, ChannelDescriptor] | None = None
                       ) -> frozenset[str]:
    """The channels that show a reply as it is written (able to, and switched on)."""
    return frozenset(name for name, d in (registry or CHANNELS).items() if d.streams(config.channels))


def command_text(channel: str, command: str) -> str:
    """``command`` ("approve 4f2a") as a user of ``channel`` types it; ``/command`` where unknown."""
    found = CHANNELS.get(channel)
    return found.command_text(command) if found else f"/{command}"


def channel_hints(registry: Mapping[str, ChannelDescriptor] | None = None) -> dict[str, str]:
    """The prompt's format hint per channel."""
    return {name: d.hint for name, d in (registry or CHANNELS).items()}


def enabled_channels(config: Config, registry: Mapping[str, ChannelDescriptor] | None = None) -> list[str]:
    """The channels the registry builds (those with a factory) that the config switched on."""
    found = sections(config.channels)
    return [name for name, d in (registry or CHANNELS).items()
            if d.factory is not None and isinstance(section := found.get(name), SwitchedSection)
            and section.enabled]


def load_factory(target: str) -> Callable[..., Channel]:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr or "build")
    if not callable(factory):
        raise TypeError(f"{target} is not callable")
    return factory


def build_channels(config: Config, deps: ChannelDeps, *,
                   registry: Mapping[str, ChannelDescriptor] | None = None) -> dict[str, Channel]:
    """Build every enabled channel, each factory given the same ``deps``; log one line per
    enabled channel saying what happened."""
    registry = CHANNELS if registry is None else registry
    built: dict[str, Channel] = {}
    for name in enabled_channels(config, registry):
        try:
            target = registry[name].factory
            assert target is not None  # enabled_channels keeps only buildable ones
            factory = load_factory(target)
            channel = factory(config, deps)
        except (LucidError, ValueError) as exc:
            logger.warning("%s: %s — disabled", name, exc)
            continue
        except ImportError as exc:
            logger.error("%s: cannot load %s (%s) — disabled", name, registry[name].factory, exc)
            continue
        except Exception:
            logger.exception("%s: failed to build — disabled", name)
            continue
        describe = getattr(channel, "describe", None)
        detail = describe() if callable(describe) else "enabled"
        logger.info("%s: %s", name, detail)
        built[name] = channel
    if not built:
        logger.warning("no channel is enabled: nobody can reach the assistant (enable one of %s)",
                       ", ".join(f"channels.{n}" for n, d in registry.items() if d.factory))
    share_intake_limits(built.values())
    return built


def share_intake_limits(channels: Iterable[Channel]) -> None:
    """Give every credential-taking HTTP intake the first one's limits (see ``SharesIntakeLimits``)."""
    sharing = [c for c in channels if isinstance(c, SharesIntakeLimits)]
    for channel in sharing[1:]:
        channel.share_intake_limits(sharing[0].intake_limits)
