"""Backups of several agents (issue 41): an archive holds a folder per agent, and a restore
puts each agent's workspace back in its own place, never in another's.

With ``agents.list`` an archive (``lucid backup --agent ID`` or ``--all``; plain ``lucid
backup`` takes the default agent) lays each agent out as one workspace's backup under
``agents/<id>/``::

    agents/home/workspace/…   agents/home/memory.bundle   agents/home/forgotten.json
    agents/work/workspace/…   …
    config.json               manifest.json  ({"format": 2, "agents": {"home": {...}, ...}})

Two ways back, both into empty places only:

- ``restore_backup(archive, DIR)`` (``lucid restore --to DIR``, gateway/ops/backup.py): a
  copy beside the live setup; each agent of the archived config's ``agents.list`` gets
  ``DIR/agents/<id>`` (``relocate``), so the copy never points at a live workspace;
- ``restore_agents(archive, config, ids)`` (``lucid restore --agent ID`` / ``--all``): into
  the workspaces the live config gives those agents, each missing or empty (checked for all
  before anything is written). An agent the archive does not hold, or an archive agent the
  config does not know, is refused naming both sides. An archive made without
  ``agents.list`` holds one assistant's workspace, and goes to the one agent named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lucidgate.config.schema import Config
from lucidgate.gateway.ops.backup import BackupError, Unpacked, archived_agents, private

__all__ = ["restore_agents"]


def restore_agents(archive: Path, config: Config, ids: list[str] | None) -> dict[str, Any]:
    """Restore agents ``ids`` (None: every agent in the archive) into their configured
    workspaces. Returns the manifest, with ``restored``: ``{id: workspace}``."""
    known = config.agent_ids()
    with Unpacked(archive, _staging_parent(config)) as unpacked:
        held = archived_agents(unpacked.manifest)
        wanted = _wanted(held, ids, known, archive)
        places = {agent_id: config.for_agent(agent_id).workspace for agent_id in wanted}
        busy = [f"{agent_id} ({place})" for agent_id, place in places.items()
                if place.exists() and (not place.is_dir() or any(place.iterdir()))]
        if busy:
            raise BackupError(f"not restoring: the workspace of {', '.join(busy)} is not empty; a restore never "
                              "writes over an agent's memory (move it aside first, or use --to DIR for a copy)")
        for agent_id, place in places.items():
            unpacked.place(agent_id if held is not None else "", place)
            private(place)
        manifest = unpacked.manifest
    manifest["restored"] = {agent_id: str(place) for agent_id, place in places.items()}
    return manifest


def _wanted(held: list[str] | None, ids: list[str] | None, known: list[str], archive: Path) -> list[str]:
    """Which agents to restore, or why not."""
    if held is None:  # one assistant's workspace, from a setup without agents.list
        if ids is None or len(ids) != 1:
            raise BackupError(f"{archive} holds one workspace, not agents: restore it with --agent ID "
                              "(into that agent's empty workspace) or --to DIR")
        held = ids
    unknown = [a for a in held if a not in known] if ids is None else [a for a in ids if a not in known]
    if unknown:
        raise BackupError(f"the config has no agent {', '.join(map(repr, unknown))} (its agents: "
                          f"{', '.join(known)}); add it to agents.list, or restore a copy with --to DIR")
    missing = [a for a in ids or [] if a not in held]
    if missing:
        raise BackupError(f"{archive} holds agent(s) {', '.join(held)}, not {', '.join(missing)}: an agent's "
                          "backup is restored only into that agent")
    return list(held) if ids is None else ids


def _staging_parent(config: Config) -> Path:
    """Where to unpack first: beside the default agent's workspace (same disk, usually)."""
    return config.workspace.parent
