"""``lucid onboard``: write a config and the workspace templates, never overwriting."""

from __future__ import annotations

import json
import secrets
from importlib import resources
from pathlib import Path

from config.fileio import atomic_write_text
from config.schema import Config

__all__ = ["default_config_document", "install_templates", "write_config"]

TEMPLATE_FILES = {
    "AGENTS.md": "AGENTS.md",
    "SOUL.md": "SOUL.md",
    "USER.md": "USER.md",
    "TOOLS.md": "TOOLS.md",
    "HEARTBEAT.md": "HEARTBEAT.md",
    "memory/MEMORY.md": "MEMORY.md",
}


def default_config_document() -> dict:
    """The defaults of DESIGN §10 with fresh webhook and console secrets, as camelCase JSON."""
    config = Config()
    data = config.model_dump(mode="json", by_alias=True, exclude_none=False)
    data["channels"]["webhook"]["token"] = secrets.token_urlsafe(32)
    data["channels"]["webhook"]["callbackSecret"] = secrets.token_urlsafe(32)
    data["console"]["token"] = secrets.token_urlsafe(32)
    # SecretStr dumps as "**********"; write real empty strings for the others.
    _unmask(data)
    return data


def _unmask(node: object) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if value == "**********":
                node[key] = ""
            else:
                _unmask(value)


def write_config(path: Path) -> bool:
    """Write a default config at ``path`` unless one exists. Returns True if written."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(default_config_document(), indent=2) + "\n")  # 0600: secrets
    return True


def install_templates(workspace: Path) -> list[str]:
    """Copy the templates that are missing into ``workspace``; return what was written."""
    written: list[str] = []
    for target, source in TEMPLATE_FILES.items():
        dest = workspace / target
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = resources.files("config").joinpath("templates", source).read_text(encoding="utf-8")
        atomic_write_text(dest, text)
        written.append(target)
    for folder in ("sessions", "skills", "memory"):
        (workspace / folder).mkdir(parents=True, exist_ok=True)
    return written
