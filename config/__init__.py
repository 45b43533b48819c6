"""Configuration: the pydantic schema, the loader and the workspace templates.

The names below load on first use: ``config.fileio`` or ``config.paths`` alone must not
build the schema's pydantic models (a tenth of a second that ``lucid --help`` never needs).
"""

from lucidgate.config.errors import ConfigError, LucidError
from lucidgate.config.lazy import lazy_names
from lucidgate.config.paths import resolve_config_path

__all__ = ["Config", "ConfigError", "LucidError", "load_config", "resolve_config_path"]

__getattr__ = lazy_names(__name__, {"Config": "schema", "load_config": "loader"})
