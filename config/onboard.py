"""``lucid onboard``: write a config and the workspace templates, never overwriting."""

from __future__ import annotations

import functools
import json
import secrets
from importlib import resources
from pathlib import Path

from lucidgate.config.fileio import atomic_write_text
from lucidgate.config.paths import DEFAULT_CONFIG_PATH
from lucidgate.config.schema import Config

__all__ = ["channel_document", "default_config_document", "install_templates", "minimal_config_document",
           "new_webhook_token", "read_config_document", "workspace_beside", "write_config", "write_config_document"]

TEMPLATE_FILES = {
    "AGENTS.md": "AGENTS.md",
    "SOUL.md": "SOUL.md",
    "USER.md": "USER.md",
    "TOOLS.md": "TOOLS.md",
    "HEARTBEAT.md": "HEARTBEAT.md",
    "memory/MEMORY.md": "MEMORY.md",
}


def default_config_document() -> dict:
    """Every setting at its default, with fresh secrets, as camelCase JSON (``lucid config show
    --defaults`` prints the same shape for a loaded config)."""
    data = Config().model_dump(mode="json", by_alias=True, exclude_none=False)
    data["channels"]["webhook"].update(_fresh_webhook_secrets())
    data["console"]["token"] = secrets.token_urlsafe(32)
    _unmask(data)  # SecretStr dumps as "**********": write real empty strings for the others
    return data


def minimal_config_document(workspace: Path | None = None) -> dict:
    """What a new config file needs to say, and nothing that equals a default: the model and
    its provider (the two settings a person fills in first), the generated secrets, and the
    workspace when it is not the default one. It loads to the same effective config as
    ``default_config_document`` with the same secrets."""
    agent: dict[str, object] = {"model": Config().agent.model}
    if workspace is not None:
        agent["workspace"] = str(workspace)
    return {
        "agents": {"defaults": agent},
        "providers": {"openai": {"apiKey": "", "apiBase": None}},
        "channels": {"webhook": _fresh_webhook_secrets()},
        "console": {"token": secrets.token_urlsafe(32)},
    }


def _fresh_webhook_secrets() -> dict[str, str]:
    # Owners listed in channels.webhook.owners speak only with ownerToken (never the integration token).
    return {"token": secrets.token_urlsafe(32), "ownerToken": secrets.token_urlsafe(32),
            "callbackSecret": secrets.token_urlsafe(32)}


def _unmask(node: object) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if value == "**********":
                node[key] = ""
            else:
                _unmask(value)


def workspace_beside(path: Path) -> Path | None:
    """The workspace ``lucid onboard -c PATH`` gives a new config: the default one for the
    default config file, else ``workspace/`` in the config's folder — so a second setup made
    with ``-c other/config.json`` never points at the live workspace. (A first start through
    ``$LUCIDGATE_CONFIG``, as a service or container does, keeps the default workspace.)"""
    if path.expanduser().resolve() == DEFAULT_CONFIG_PATH.expanduser().resolve():
        return None
    return path.expanduser().resolve().parent / "workspace"


def write_config(path: Path, workspace: Path | None = None) -> bool:
    """Write a new minimal config at ``path`` unless one exists (``workspace``: a workspace
    other than the default one). Returns True if written."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    document = minimal_config_document(workspace)
    atomic_write_text(path, json.dumps(document, indent=2) + "\n")  # 0600: secrets
    return True


def new_webhook_token(path: Path, key: str = "token") -> str:
    """Put a fresh ``channels.webhook.<key>`` (``token`` or ``ownerToken``) into the config at
    ``path`` (other keys kept); return it.

    For an existing config whose token is empty or leaked: ``lucid onboard --webhook-token``
    (``--webhook-owner-token`` for the owner credential).
    """
    if not path.exists():
        write_config(path)
    data = read_config_document(path)
    token = secrets.token_urlsafe(32)
    channel_document(data, "webhook", path)[key] = token
    write_config_document(path, data)
    return token


def read_config_document(path: Path) -> dict:
    """The config file at ``path`` as JSON (``{}`` when empty), for an edit that keeps every key
    it does not change; ``ValueError`` saying what to fix when it is not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); fix it first") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a JSON object")
    return data


def channel_document(data: dict, channel: str, path: Path) -> dict:
    """``channels.<channel>`` of a config document, created when absent."""
    channels = data.setdefault("channels", {})
    section = channels.setdefault(channel, {}) if isinstance(channels, dict) else None
    if not isinstance(section, dict):
        raise ValueError(f"{path}: channels.{channel} must be a JSON object")
    return section


def write_config_document(path: Path, data: dict) -> None:
    """Replace the config file atomically with ``data``; it stays 0600 (it holds secrets)."""
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", mode=0o600)


def install_templates(workspace: Path) -> list[str]:
    """Copy the templates that are missing into ``workspace``; return what was written."""
    written: list[str] = []
    for target, source in TEMPLATE_FILES.items():
        dest = workspace / target
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = resources.files("lucidgate.config").joinpath("templates", source).read_text(encoding="utf-8")
        atomic_write_text(dest, text)
        written.append(target)
    for folder in ("sessions", "skills", "memory"):
        (workspace / folder).mkdir(parents=True, exist_ok=True)
    return written


@functools.cache
def template_text(target: str) -> str:
    """The onboarding template of a workspace file ("" when it has none)."""
    source = TEMPLATE_FILES.get(target)
    if source is None:
        return ""
    return resources.files("lucidgate.config").joinpath("templates", source).read_text(encoding="utf-8")


def _meaningful(text: str) -> set[str]:
    return {" ".join(line.split()) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def beyond_template(target: str, text: str) -> bool:
    """Whether ``text`` holds anything of its own: a line that is neither blank, a heading,
    nor a line of the onboarding template. An untouched template says nothing worth a
    place in the prompt."""
    return bool(_meaningful(text) - _meaningful(template_text(target)))

