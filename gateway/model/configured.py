"""Whether the configured model has a usable provider: read from config alone.

Its own module so that commands which call no model (``lucid status``, ``onboard``) can ask
without importing the model client and what it pulls in.
"""

from __future__ import annotations

import os

from lucidgate.config.schema import Config


def provider_configured(config: Config, model: str | None = None) -> tuple[bool, str]:
    """``(True, "ok")``, or False and what the user should do."""
    model = model or config.agent.model
    name, provider = config.provider_for(model)
    if provider is None:
        return False, f"no providers.{name} entry in the config for model {model!r}"
    if provider.api_base or provider.api_key.get_secret_value():
        return True, "ok"
    env_key = f"{name.upper()}_API_KEY"
    if os.environ.get(env_key):
        return True, "ok"
    return False, (
        f"no API key for {name}: set providers.{name}.apiKey in the config (or {env_key}), "
        f"or point providers.{name}.apiBase at a local OpenAI-compatible server "
        "(e.g. http://127.0.0.1:11434/v1 for Ollama)"
    )
