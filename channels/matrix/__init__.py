"""The Matrix channel package: everything Matrix-specific lives here.

Built on matrix-nio (the maintained asyncio client, sans-I/O core, typed responses) rather
than mautrix (a framework for bridges and appservices, heavier than a single bot account
needs). ``build`` is the registry's factory: it refuses early, with the setting to fix, when
the section cannot work, and otherwise returns a ``MatrixChannel``.

Modules: ``channel`` (lifecycle, intake, media in), ``sync`` (``/sync`` long polling and the
persisted token), ``settings`` (the frozen settings the channel runs with), ``login`` (access token or password), ``state`` (``state/matrix.json``),
``events`` (room events to turns), ``format`` (replies as Matrix HTML, edits), ``send``
(outbound, streaming edits, typing, files out), ``calls`` (nio errors and their retries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lucidgate.channels.base import refuse_if
from lucidgate.channels.deps import ChannelDeps

if TYPE_CHECKING:
    from lucidgate.channels.matrix.channel import MatrixChannel
    from lucidgate.config.schema import Config, MatrixConfig

__all__ = ["build", "preflight"]


def preflight(section: MatrixConfig) -> str | None:
    """Why this section cannot work (None when it can): checked before anything connects."""
    parts = urlsplit(section.homeserver.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "no homeserver URL (set channels.matrix.homeserver, e.g. https://matrix.example.org)"
    if section.access_token.get_secret_value():
        return None
    if not section.password.get_secret_value():
        return "no credential (set channels.matrix.accessToken, or userId and password)"
    if not section.user_id.startswith("@") or ":" not in section.user_id:
        return "a password login needs channels.matrix.userId (@name:server)"
    return None


def build(config: Config, deps: ChannelDeps) -> MatrixChannel:
    """The registry's factory (Matrix has no command menu, so ``deps.commands`` is unused)."""
    section = config.channels.matrix
    refuse_if(preflight(section))
    from lucidgate.channels.matrix.channel import MatrixChannel
    from lucidgate.channels.matrix.settings import MatrixSettings

    return MatrixChannel(MatrixSettings.from_section(section), deps.bus, workspace=deps.workspace,
                         pairing=deps.pairing)
