"""The file, search and shell tools, configured from ``config.tools`` (DESIGN §8, §10).

The composition root adds the tools that need running parts (``message``, ``cron``, …).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lucidgate.config import Config
from lucidgate.gateway.tools.base import Tool
from lucidgate.gateway.tools.files import EditFile, ListDir, ReadFile, WriteFile
from lucidgate.gateway.tools.search import Grep
from lucidgate.gateway.tools.shell import ExecTool

# read_file keeps its own page below the registry's cap so its "continue with offset=" footer
# survives instead of being cut by the generic truncation marker.
_READ_MARGIN = 500


def builtin_tools(config: Config, *, other_agents: Sequence[Path] = ()) -> list[Tool]:
    """read_file, write_file, edit_file, list_dir, grep and exec (owner only).

    ``other_agents``: the workspaces of the daemon's other agents. With any, the file tools
    are confined to this agent's workspace whatever ``restrictToWorkspace`` says, and exec
    runs only in the sandbox, with those workspaces hidden (issue 41: isolation in code)."""
    tools = config.tools
    restrict = tools.restrict_to_workspace or bool(other_agents)
    result_cap = config.agents.defaults.max_tool_result_chars
    # Guests granted the write tools can leave words in ordinary files: reading them is
    # reading a guest's words (the turn is tainted; see gateway/approvals).
    guest_writes = bool({"write_file", "edit_file"} & set(tools.guest_tools))
    return [
        ReadFile(restrict=restrict, max_chars=max(500, min(12_000, result_cap - _READ_MARGIN)),
                 guest_writes=guest_writes),
        WriteFile(restrict=restrict),
        EditFile(restrict=restrict),
        ListDir(restrict=restrict),
        Grep(restrict=restrict, guest_writes=guest_writes),
        ExecTool(timeout_s=tools.exec.timeout_s, max_output_chars=tools.exec.max_output_chars,
                 sandbox=tools.exec.sandbox, network=tools.exec.network, pass_env=tools.exec.pass_env,
                 hide=[*_config_paths(config), *other_agents], confined=bool(other_agents)),
    ]


def _config_paths(config: Config) -> list[Path]:
    """What a sandboxed command must not read: the config file, and its folder when the folder
    is lucidgate's own (``~/.lucidgate``, ``/etc/lucidgate``), not a shared one such as /etc."""
    path = config.source_path
    if path is None:
        return []
    return [path, path.parent] if "lucid" in path.parent.name.lower() else [path]
