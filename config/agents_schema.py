"""Several agents in one daemon: ``agents.list`` and ``bindings`` (issue 41, DESIGN §1).

An agent is a workspace (memory, notes, sessions, skills, recall index, git history) plus
its settings: ``agents.defaults`` with the entry's own keys deep-merged over them. Without
a list there is one implicit agent, the default, and the config means exactly what it meant
before. ``bindings`` say which agent an inbound message goes to (``channels.routing``).

Checked here, once, at load: ids are well formed and unique, at most one entry is the
default, no two agents share a workspace or nest one inside another (isolation is by
folder), every override is a real ``agents.defaults`` key, and every binding and
``shareWith`` names an agent that exists. Each error names the entry it is about.
"""

from __future__ import annotations

import os.path
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lucidgate.config.section import Section

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["AGENT_ID", "AgentEntry", "AgentsView", "Binding", "BindingMatch", "check_agents", "merged_settings",
           "owners_for"]

DEFAULT_AGENT = "default"  # the implicit agent's id when there is no agents.list

AGENT_ID = r"^[a-z0-9][a-z0-9_-]{0,31}$"
# The entry's own keys; every other key is an override of an ``agents.defaults`` setting.
_ENTRY_KEYS = frozenset({"id", "workspace", "default", "owners", "shareWith", "share_with"})


class AgentEntry(Section):
    """One entry of ``agents.list``: ``{"id": "work", "workspace": "~/.lucidgate/work",
    "model": "openai/gpt-4o-mini"}``. Keys other than the entry's own override
    ``agents.defaults`` for this agent (checked against it by ``merged_settings``)."""

    model_config = ConfigDict(**{**Section.model_config, "extra": "allow"})

    id: str = Field(pattern=AGENT_ID)
    workspace: str = Field(min_length=1)
    default: bool = False
    # Who is this agent's owner, per channel: {"telegram": ["42"]}. A non-default agent has
    # no other owners; the default agent has these besides the channels' own owners.
    owners: dict[str, list[str]] = Field(default_factory=dict)
    # Agents whose memory files and notes this one's memory_search may read (read-only, labelled).
    share_with: list[str] = Field(default_factory=list)

    @property
    def overrides(self) -> dict[str, Any]:
        """The ``agents.defaults`` keys this entry sets, as written."""
        return {k: v for k, v in (self.__pydantic_extra__ or {}).items() if k not in _ENTRY_KEYS}

    @property
    def workspace_path(self) -> Path:
        return Path(self.workspace).expanduser()


class BindingMatch(Section):
    """What a binding matches on; every key given must match (ids as strings)."""

    model_config = ConfigDict(**{**Section.model_config, "coerce_numbers_to_str": True})

    channel: str | None = Field(None, min_length=1)
    account: str | None = Field(None, min_length=1)
    chat: str | None = Field(None, min_length=1)
    sender: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _not_empty(self) -> BindingMatch:
        if not any((self.channel, self.account, self.chat, self.sender)):
            raise ValueError("a binding's match needs at least one of channel, account, chat, sender")
        return self


class Binding(Section):
    """``{"agent": "work", "match": {"channel": "webhook", "chat": "w1"}}``."""

    agent: str = Field(pattern=AGENT_ID)
    match: BindingMatch


def merge_section(model: type[BaseModel], base: dict[str, Any], override: dict[str, Any],
                  where: str) -> dict[str, Any]:
    """``override`` (camelCase or snake_case keys) deep-merged over ``base`` (a ``model_dump``
    of ``model``): a nested section merges key by key, any other value replaces. A key that
    is no setting of ``model`` is an error naming ``where``."""
    merged = dict(base)
    for key, value in override.items():
        name = _field_name(model, key)
        if name is None:
            raise ValueError(f"{where}: {key!r} is not a setting of agents.defaults")
        annotation = model.model_fields[name].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, dict) \
                and isinstance(merged.get(name), dict):
            merged[name] = merge_section(annotation, merged[name], value, f"{where}.{key}")
        else:
            merged[name] = value
    return merged


def _field_name(model: type[BaseModel], key: str) -> str | None:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return name
    return None


def merged_settings(defaults: BaseModel, entry: AgentEntry, where: str) -> Any:
    """The agent's settings: ``defaults`` (an ``AgentDefaults``) with the entry's overrides
    and its workspace, validated as an ``AgentDefaults`` again (so limits still hold)."""
    model = type(defaults)
    merged = merge_section(model, defaults.model_dump(), entry.overrides, where)
    merged["workspace"] = entry.workspace
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{where}: {problems}") from None


def owners_for(channels: BaseModel, entry: AgentEntry, *, default: bool) -> BaseModel:
    """``channels`` with each channel's owners as this agent sees them: only the entry's
    ``owners`` for a non-default agent, the channel's own plus the entry's for the default.
    The agent's stored-history roles and scheduled tasks read owners from here."""
    update: dict[str, Any] = {}
    for name, section in channels:
        if not hasattr(section, "owner_ids"):
            continue
        listed = [str(o) for o in entry.owners.get(name, [])]
        if hasattr(section, "owners"):
            owners = [*section.owners, *listed] if default else listed
            update[name] = section.model_copy(update={"owners": owners})
        elif hasattr(section, "owner"):  # the OpenAI endpoint: one fixed owner id, or none
            owner_id = next(iter(type(section)(owner=True).owner_ids()))
            owner = (section.owner if default else False) or owner_id in listed
            update[name] = section.model_copy(update={"owner": owner})
    return channels.model_copy(update=update)


def check_agents(entries: list[AgentEntry], bindings: list[Binding], defaults: BaseModel) -> None:
    """Every rule of the module docstring; raises ``ValueError`` naming the bad entry."""
    ids: set[str] = set()
    workspaces: list[tuple[str, Path]] = []
    for i, entry in enumerate(entries):
        where = f"agents.list[{i}] ({entry.id})"
        if entry.id in ids:
            raise ValueError(f"{where}: the id {entry.id!r} is used twice")
        ids.add(entry.id)
        merged_settings(defaults, entry, where)
        path = Path(os.path.normpath(os.path.abspath(entry.workspace_path)))
        for other_id, other in workspaces:
            if path == other or path.is_relative_to(other) or other.is_relative_to(path):
                raise ValueError(f"{where}: its workspace {entry.workspace} is the same as, or nested with, "
                                 f"agent {other_id!r}'s; each agent needs a folder of its own")
        workspaces.append((entry.id, path))
    defaults_marked = [e.id for e in entries if e.default]
    if len(defaults_marked) > 1:
        raise ValueError(f"agents.list: only one agent can be the default ({', '.join(defaults_marked)} are)")
    for i, entry in enumerate(entries):
        for shared in entry.share_with:
            if shared not in ids or shared == entry.id:
                raise ValueError(f"agents.list[{i}] ({entry.id}): shareWith names {shared!r}, not another agent")
    for i, binding in enumerate(bindings):
        if binding.agent not in ids:
            known = ", ".join(sorted(ids)) or "none: add agents.list first"
            raise ValueError(f"bindings[{i}]: no agent {binding.agent!r} in agents.list (agents: {known})")


class AgentsView:
    """The root config's agents (mixed into ``Config``): which there are, which one is the
    default, and each one's own ``Config``. Without ``agents.list`` there is one agent,
    ``default``, and its config is the root config itself."""

    if TYPE_CHECKING:
        agents: Any
        channels: Any
        bindings: list[Binding]

        def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Self: ...

    def check_agents(self) -> None:
        if self.agents.entries or self.bindings:
            check_agents(self.agents.entries, self.bindings, self.agents.defaults)

    def agent_ids(self) -> list[str]:
        """Every agent's id, the default first."""
        if not self.agents.entries:
            return [DEFAULT_AGENT]
        default = self.default_agent_id
        return [default, *(e.id for e in self.agents.entries if e.id != default)]

    @property
    def default_agent_id(self) -> str:
        """The entry marked ``default``, else the first; ``default`` without a list."""
        entries: list[AgentEntry] = self.agents.entries
        if not entries:
            return DEFAULT_AGENT
        return next((e.id for e in entries if e.default), entries[0].id)

    def for_agent(self, agent_id: str) -> Self:
        """The config agent ``agent_id`` runs with: ``agents.defaults`` is its merged settings
        (its workspace included) and each channel's owners are its own (``owners_for``);
        everything else is shared. Without a list: this config, unchanged."""
        entries: list[AgentEntry] = self.agents.entries
        if not entries and agent_id == DEFAULT_AGENT:
            return self
        entry = next((e for e in entries if e.id == agent_id), None)
        if entry is None:
            raise KeyError(f"no agent {agent_id!r} in agents.list")
        settings = merged_settings(self.agents.defaults, entry, f"agents.list ({entry.id})")
        agents = self.agents.model_copy(update={"defaults": settings, "entries": []})
        channels = owners_for(self.channels, entry, default=agent_id == self.default_agent_id)
        return self.model_copy(update={"agents": agents, "channels": channels, "bindings": []})
