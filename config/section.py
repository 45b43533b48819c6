"""The base of every configuration section (``config.schema``, ``config.channel_schema``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case accepted, no unknown keys.

    Validators are built on first use (``defer_build``) and nested sections default through
    ``subsection()``, so loading a config builds one validator, the root's, instead of one per
    section class: every command that reads the config starts faster."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        defer_build=True,
    )

    @classmethod
    def default_of(cls, field: str) -> Any:
        """The schema's default of ``field``. A library class whose callers may omit a setting
        (tests, one-off tools) takes its fallback from here, so the number is written once."""
        return cls.model_fields[field].get_default(call_default_factory=True)


def subsection() -> Any:
    """The default of a field holding a nested section: an empty mapping that the parent's
    validator fills in (a factory calling the section class would build its own validator)."""
    return Field(default_factory=dict, validate_default=True)
