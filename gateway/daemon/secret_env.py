"""Take secrets out of the gateway's own environment once the config holds them.

A provider key or token passed as an environment variable stays in the process's
environment for its whole life: every child inherits ``os.environ`` unless told otherwise,
and ``/proc/<pid>/environ`` shows the environment the process *started* with to anyone
running as the same user — an exec'd command included (``tr '\\0' '\\n' < /proc/$PPID/environ``).

``scrub_secret_env(config)`` runs right after the config is loaded:

1. a ``<PROVIDER>_API_KEY`` variable whose provider has no key in the config is copied into
   the config (litellm then gets it explicitly with every call, as it gets configured keys);
2. every ``LUCIDGATE_*`` variable but ``LUCIDGATE_CONFIG`` (already applied to the config),
   and every variable named like a secret (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``,
   ``*_PASSWORD``) is removed from ``os.environ`` — except the names ``tools.exec.passEnv``
   hands to commands on purpose;
3. the removed ``NAME=value`` strings are overwritten with zero bytes where they sit in the
   process's initial environment block (the memory ``/proc/<pid>/environ`` reads), found
   through ``/proc/self/stat``; ``unsetenv`` alone leaves them there.

The config is loaded once per process (a change needs a restart), so nothing needs the
variables afterwards.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import MutableMapping

from pydantic import SecretStr

from lucidgate.config.schema import Config, ProviderConfig

logger = logging.getLogger(__name__)

__all__ = ["scrub_secret_env", "secret_names"]

SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
KEEP = frozenset({"LUCIDGATE_CONFIG"})


def secret_names(environ: MutableMapping[str, str], keep: frozenset[str] | set[str] = KEEP) -> list[str]:
    """The variables ``scrub_secret_env`` removes from ``environ``."""
    return sorted(name for name in environ
                  if name not in keep and (name.upper().startswith("LUCIDGATE_")
                                           or name.upper().endswith(SECRET_SUFFIXES)))


def scrub_secret_env(config: Config, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Move provider keys into ``config`` and remove secret variables (see the module
    docstring); returns the names removed."""
    env = os.environ if environ is None else environ
    names = secret_names(env, KEEP | set(config.tools.exec.pass_env))
    for name in names:
        if name.upper().endswith("_API_KEY") and not name.upper().startswith("LUCIDGATE_"):
            _adopt_key(config, name[: -len("_API_KEY")].lower(), env[name])
    block = _initial_block() if env is os.environ else None
    for name in names:
        pointer = _getenv_pointer(name) if block is not None else None
        value = env.pop(name)
        if block is not None and pointer is not None:
            _wipe(pointer, name, value, block)
    secrets = [name for name in names if name.upper().endswith(SECRET_SUFFIXES)]
    settings = [name for name in names if name not in secrets]
    if secrets:
        logger.info("removed %d secret variable(s) from the gateway's environment: %s", len(secrets),
                    ", ".join(secrets))
    if settings:  # applied to the config already; cleared because one of them may hold a key
        logger.debug("cleared %d applied setting(s) from the gateway's environment: %s", len(settings),
                     ", ".join(settings))
    return names


def _adopt_key(config: Config, provider: str, value: str) -> None:
    entry = config.providers.get(provider)
    if entry is None:
        setattr(config.providers, provider, ProviderConfig(api_key=SecretStr(value)))
    elif not entry.api_key.get_secret_value():
        entry.api_key = SecretStr(value)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_void_p
        libc.getenv.argtypes = [ctypes.c_char_p]
        return libc
    except (OSError, AttributeError):
        return None


def _initial_block() -> tuple[int, int] | None:
    """(start, end) of the environment block the kernel shows in /proc/self/environ."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # Fields after the ")" of the command name; env_start/env_end are fields 50 and 51.
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[47]), int(fields[48])
    except (IndexError, ValueError):
        return None


def _getenv_pointer(name: str) -> int | None:
    libc = _libc()
    if libc is None:
        return None
    pointer = libc.getenv(name.encode())
    return int(pointer) if pointer else None


def _wipe(value_at: int, name: str, value: str, block: tuple[int, int]) -> None:
    """Zero ``NAME=value`` if it lies inside the initial block (never touch other memory)."""
    encoded = os.fsencode(value)
    start = value_at - len(os.fsencode(name)) - 1
    end = value_at + len(encoded)
    if not (block[0] <= start and end <= block[1]):
        return  # set later by putenv: libc's copy, not what /proc shows
    if ctypes.string_at(value_at, len(encoded)) != encoded:
        return
    ctypes.memset(start, 0, end - start)
