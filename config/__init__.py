"""Configuration: the pydantic schema, the loader and the workspace templates."""

from config.errors import ConfigError, LucidError
from config.loader import load_config, resolve_config_path
from config.schema import Config

__all__ = ["Config", "ConfigError", "LucidError", "load_config", "resolve_config_path"]
