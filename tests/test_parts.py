"""One parts factory: the daemon's wiring and a one-off CLI command open the same stores."""

from __future__ import annotations

from collections.abc import Callable

from lucidgate.config.schema import Config
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.stores import WorkspaceParts


def test_the_gateway_and_the_cli_open_the_same_stores(make_config: Callable[..., Config]) -> None:
    config = make_config(agents={"defaults": {"memory": {"maxHistoryEntries": 77}}})
    gateway = build_gateway(config)
    wired = gateway.parts
    cli = WorkspaceParts(config)
    assert cli.sessions.dir == wired.sessions.dir
    assert cli.memory.history_path == wired.store.history_path
    assert cli.memory.max_history_entries == wired.store.max_history_entries == 77  # configured alike
    assert cli.usage.folder == wired.usage.folder
    assert cli.reminders.path == wired.scheduler.reminders.store.path
    assert cli.job_state.path == wired.scheduler.state.path
    assert cli.pairing.path == gateway.channel_deps.pairing.path  # what `lucid pairing approve` approves, the gates read


def test_a_store_is_built_once_and_only_when_asked_for(make_config: Callable[..., Config]) -> None:
    parts = WorkspaceParts(make_config())
    assert "sessions" not in vars(parts)
    assert parts.sessions is parts.sessions
    assert set(vars(parts)) >= {"sessions"} and "memory" not in vars(parts)
