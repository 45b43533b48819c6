"""discord.py setup: the intents we need, the client, and where it connects.

discord.py takes its REST root from the class attribute ``discord.http.Route.BASE`` and its
first Gateway URL from ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` (later
connections use the ``resume_gateway_url`` that READY hands out). Both are process-wide, so
``Endpoints`` sets them while the channel runs and puts the previous values back when it
stops; one process runs at most one Discord channel. The Gateway URL is the one Discord
(or a stand-in) names in ``GET /gateway/bot``, unless ``channels.discord.gatewayUrl`` is set.
"""

from __future__ import annotations

import logging

import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from lucidgate.config.redact import logger_family

DEFAULT_API_BASE = "https://discord.com/api"
API_VERSION = 10

# Application flags (GET /applications/@me) that grant the Message Content intent.
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)  # GATEWAY_MESSAGE_CONTENT, ..._LIMITED


def intents() -> discord.Intents:
    """Guild and DM messages with their content; nothing else (no members, no presences)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def make_client(*, max_ratelimit_timeout_s: float = 30.0, heartbeat_timeout_s: float = 60.0) -> discord.Client:
    """A client that caches as little as it can: the adapter reads each message as it comes."""
    # no voice here: keep discord.py from warning that voice libraries are missing
    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
    return discord.Client(
        intents=intents(),
        max_messages=None,
        chunk_guilds_at_startup=False,
        member_cache_flags=discord.MemberCacheFlags.none(),
        guild_ready_timeout=0.5,
        max_ratelimit_timeout=max_ratelimit_timeout_s,
        heartbeat_timeout=heartbeat_timeout_s,  # silence this long: a zombie socket, resumed
    )


def rest_base(api_base: str | None) -> str:
    return f"{(api_base or DEFAULT_API_BASE).rstrip('/')}/v{API_VERSION}"


class Endpoints:
    """Points discord.py at ``rest`` (and later a Gateway URL) and restores it afterwards."""

    def __init__(self, rest: str) -> None:
        self.rest = rest
        self._saved: tuple[str, yarl.URL] | None = None

    def apply(self) -> None:
        if self._saved is None:
            self._saved = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        Route.BASE = self.rest

    def use_gateway(self, url: str) -> None:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)

    def restore(self) -> None:
        if self._saved is not None:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = self._saved
            self._saved = None


def log_targets() -> list[logging.Filterer]:
    """Where a token could show up: the root handlers and discord.py's and aiohttp's loggers."""
    return [*logging.getLogger().handlers, *logger_family("discord", "aiohttp")]
