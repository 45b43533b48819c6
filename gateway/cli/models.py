"""``lucid models``: the configured model, its fallbacks and presets, and whether each answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from lucidgate.gateway.cli._common import ConfigOption, console, load_or_exit, new_table

if TYPE_CHECKING:
    from lucidgate.config import Config


def register(app: typer.Typer) -> None:
    app.command("models")(models)


def models(config_path: ConfigOption = None) -> None:
    """List the default model, fallbackModels and modelPresets, and probe each provider."""
    config = load_or_exit(config_path)
    agent = config.agent
    rows: list[tuple[str, str]] = [("default", agent.model)]
    rows += [(f"fallback {i}", m) for i, m in enumerate(agent.fallback_models, 1)]
    rows += [(f"preset {name}", m) for name, m in sorted(agent.model_presets.items())]
    table = new_table("role", "model", "provider", "reachable")
    probed: dict[str, str] = {}
    for role, model in rows:
        name, _ = config.provider_for(model)
        if name not in probed:
            probed[name] = reachability(config, model)
        table.add_row(role, model, name, probed[name])
    console.print(table)


def reachability(config: Config, model: str) -> str:
    """GET <apiBase>/models (3 s) for a provider with a base URL; key presence otherwise."""
    import os

    import httpx

    name, provider = config.provider_for(model)
    if provider is None:
        return f"no providers.{name} entry"
    key = provider.api_key.get_secret_value() or os.environ.get(f"{name.upper()}_API_KEY", "")
    if not provider.api_base:
        return "API key set (hosted; not probed)" if key else "no API key"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(provider.api_base.rstrip("/") + "/models", timeout=3, headers=headers)
    except httpx.HTTPError as exc:
        return f"unreachable ({type(exc).__name__})"
    return "yes" if response.status_code < 400 else f"HTTP {response.status_code}"
