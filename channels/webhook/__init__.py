"""The HTTP webhook channel package: ``POST /v1/messages`` and the sessions API.

``build`` is the registry's factory. Modules: ``channel`` (lifecycle, routes, the gate, answers
out), ``intake`` (publishing a message and holding its request open until the answer),
``api`` (request/response models, auth and body-cap route class, per-sender rate limit),
``store`` (SQLite: idempotency and callback records), ``callbacks`` (one signed, SSRF-checked
callback POST per attempt; the gateway's outbox retries it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.webhook.channel import WebhookChannel

if TYPE_CHECKING:
    from lucidgate.config.schema import Config

__all__ = ["WebhookChannel", "build"]


def build(config: Config, deps: ChannelDeps) -> WebhookChannel:
    """The registry's factory. An empty token still builds: the endpoint answers 503 saying
    what to set, which is easier to find than a channel that is silently absent."""
    return WebhookChannel(config.channels.webhook, deps.bus, workspace=deps.workspace,
                          max_text_chars=config.agent.max_message_chars, sessions=deps.sessions)
