"""Where the config file is, without the schema: commands that only need the path (``lucid
--help``, ``onboard``'s messages, the service unit) must not pay for building pydantic models."""

from __future__ import annotations

import os
from pathlib import Path

ENV_PREFIX = "LUCIDGATE_"
DEFAULT_CONFIG_PATH = Path("~/.lucidgate/config.json")


def resolve_config_path(explicit: str | Path | None = None) -> Path:
    """Which config file to use: explicit flag, then env, then the default path."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("LUCIDGATE_CONFIG")
    if env:
        return Path(env).expanduser()
    return DEFAULT_CONFIG_PATH.expanduser()
