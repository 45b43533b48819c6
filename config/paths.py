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


def first_run_note(explicit: str | Path | None, path: Path) -> str:
    """What to say after a first start wrote a default config at ``path``.

    A ``-c`` path that does not exist is refused, but ``$LUCIDGATE_CONFIG`` naming one is how
    a service or container starts for the first time, so the file is made; the note names the
    variable, so a typo in it is seen at once instead of becoming a second, empty setup."""
    note = f"first run: wrote a default config to {path}"
    if not explicit and os.environ.get("LUCIDGATE_CONFIG"):
        note += (" (LUCIDGATE_CONFIG names it and it did not exist; if you meant another file, "
                 "fix the variable and delete this one)")
    return note
