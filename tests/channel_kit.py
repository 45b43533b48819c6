"""A ``ChannelDeps`` for a channel built alone, outside any gateway.

Inside a gateway a test builds its channel with ``gateway.channel_deps`` (the root's, so the
channel shares the bus and the pairing store); without one, this opens the workspace's pairing
file the way the root's ``WorkspaceParts.pairing`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lucidgate.channels.base import CommandSpec
from lucidgate.channels.bus import MessageBus
from lucidgate.channels.deps import ChannelDeps
from lucidgate.channels.pairing import PairingStore, default_path


def deps_at(bus: MessageBus, workspace: Path, commands: Sequence[CommandSpec] = ()) -> ChannelDeps:
    return ChannelDeps(bus, Path(workspace), PairingStore(default_path(Path(workspace))), commands=tuple(commands))
