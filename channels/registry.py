"""Which channel adapters exist, and building the enabled ones (STYLE §6).

A registry of import strings rather than an ``if`` chain per platform: a channel's
module (and its SDK) is imported only when the channel is enabled. Each module exposes
``create_channel(config, bus, *, workspace) -> Channel``.

Building is forgiving per channel and strict overall: one line is logged for every enabled
channel — started, or refused and why ("telegram: no token — disabled") — and a channel
that cannot be built never stops the others.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from channels.base import Channel
from channels.bus import MessageBus
from config.errors import LucidError
from config.schema import Config

logger = logging.getLogger(__name__)

CHANNEL_FACTORIES: dict[str, str] = {
    "telegram": "channels.telegram:create_channel",
    "slack": "channels.slack:create_channel",
    "webhook": "channels.webhook:create_channel",
}


class ChannelUnavailable(LucidError):
    """A channel factory refuses to build; the message says why and what to set."""


def _secret(section: Any, name: str) -> str:
    value = getattr(section, name, None)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value or "")


def _telegram_refusal(section: Any) -> str | None:
    return None if _secret(section, "token") else "no token (set channels.telegram.token)"


def _slack_refusal(section: Any) -> str | None:
    if not _secret(section, "bot_token"):
        return "no botToken (set channels.slack.botToken)"
    if section.mode == "socket" and not _secret(section, "app_token"):
        return "socket mode needs an appToken (channels.slack.appToken)"
    if section.mode == "http" and not _secret(section, "signing_secret"):
        return "http mode needs a signingSecret (channels.slack.signingSecret)"
    return None


# Cheap checks that need no import: a missing token is reported the same way for every
# platform, whatever its factory would have raised.
PREFLIGHT: dict[str, Callable[[Any], str | None]] = {
    "telegram": _telegram_refusal,
    "slack": _slack_refusal,
}


def enabled_channels(config: Config, names: Mapping[str, str] | None = None) -> list[str]:
    registry = CHANNEL_FACTORIES if names is None else names
    return [name for name in registry
            if getattr(getattr(config.channels, name, None), "enabled", False)]


def load_factory(target: str) -> Callable[..., Channel]:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr or "create_channel")
    if not callable(factory):
        raise TypeError(f"{target} is not callable")
    return factory


def build_channels(
    config: Config,
    bus: MessageBus,
    *,
    workspace: Path | None = None,
    factories: Mapping[str, str] | None = None,
) -> dict[str, Channel]:
    """Build every enabled channel; log one line per enabled channel saying what happened."""
    registry = CHANNEL_FACTORIES if factories is None else factories
    workspace = config.workspace if workspace is None else workspace
    built: dict[str, Channel] = {}
    for name in enabled_channels(config, registry):
        section = getattr(config.channels, name)
        check = PREFLIGHT.get(name)
        reason = check(section) if check is not None else None
        if reason is not None:
            logger.warning("%s: %s — disabled", name, reason)
            continue
        try:
            factory = load_factory(registry[name])
            channel = factory(config, bus, workspace=workspace)
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
        logger.warning("no channel is enabled: nobody can reach the assistant "
                       "(enable channels.webhook, channels.telegram or channels.slack)")
    return built
