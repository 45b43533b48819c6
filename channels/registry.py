"""Which channel adapters exist, and building the enabled ones (imported only when enabled).

A registry of import strings rather than an ``if`` chain per platform: a channel's
package (and its SDK) is imported only when the channel is enabled. Each entry names a
``build(config, bus, *, workspace, commands) -> Channel`` factory; a factory that cannot
work with its section (no token…) raises ``ChannelUnavailable`` saying what to set.
Adding a channel is one package, one line here and its config model.

Building is forgiving per channel and strict overall: one line is logged for every enabled
channel — started, or refused and why ("telegram: no token — disabled") — and a channel
that cannot be built never stops the others.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from channels.base import Channel, ChannelUnavailable, CommandSpec
from channels.bus import MessageBus
from config.errors import LucidError
from config.schema import Config

logger = logging.getLogger(__name__)

__all__ = ["CHANNEL_FACTORIES", "ChannelUnavailable", "build_channels", "enabled_channels", "load_factory"]

CHANNEL_FACTORIES: dict[str, str] = {
    "telegram": "channels.telegram:build",
    "slack": "channels.slack:build",
    "discord": "channels.discord:build",
    "matrix": "channels.matrix:build",
    "webhook": "channels.webhook:build",
    "openai": "channels.openai:build",
}


def enabled_channels(config: Config, names: Mapping[str, str] | None = None) -> list[str]:
    registry = CHANNEL_FACTORIES if names is None else names
    return [name for name in registry
            if getattr(getattr(config.channels, name, None), "enabled", False)]


def load_factory(target: str) -> Callable[..., Channel]:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr or "build")
    if not callable(factory):
        raise TypeError(f"{target} is not callable")
    return factory


def build_channels(
    config: Config,
    bus: MessageBus,
    *,
    workspace: Path | None = None,
    commands: Sequence[CommandSpec] = (),
    factories: Mapping[str, str] | None = None,
) -> dict[str, Channel]:
    """Build every enabled channel; log one line per enabled channel saying what happened.

    ``commands`` (the gateway's slash commands) go to every factory, for platform menus.
    """
    registry = CHANNEL_FACTORIES if factories is None else factories
    workspace = config.workspace if workspace is None else workspace
    built: dict[str, Channel] = {}
    for name in enabled_channels(config, registry):
        try:
            factory = load_factory(registry[name])
            channel = factory(config, bus, workspace=workspace, commands=tuple(commands))
        except (LucidError, ValueError) as exc:
            logger.warning("%s: %s — disabled", name, exc)
            continue
        except ImportError as exc:
            logger.error("%s: cannot load %s (%s) — disabled", name, registry[name], exc)
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
                       ", ".join(f"channels.{n}" for n in registry))
    return built
