"""MCP tools as lucidgate tools: ``mcp_<server>_<tool>`` with the server's own schema.

The adapter satisfies the ``gateway.tools.base.Tool`` protocol. Its ``Params`` model
accepts any JSON object and reports the server's input schema (compacted: no titles, no
``$schema``, descriptions capped) as its JSON schema, so the model sees exactly what the
server documents while the server stays the judge of its own arguments.

MCP tools are owner-only by default: the registry lets a guest use a tool only when its
name is listed in ``tools.guestTools``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.turn import TurnContext


class ToolCaller(Protocol):
    """What a tool needs from the manager that owns the connection."""

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> str: ...

MAX_NAME = 64  # OpenAI's limit on function names
MAX_DESCRIPTION = 1024
MAX_PROPERTY_DESCRIPTION = 300
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """``mcp_<server>_<tool>``, restricted to what every provider accepts in a function name."""
    name = _UNSAFE.sub("_", f"mcp_{server}_{tool}")
    return name[:MAX_NAME]


def compact_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """The server's JSON schema minus what costs tokens and means nothing to the model."""

    def strip(node: Any, depth: int) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for key, value in node.items():
                if key in ("title", "$schema", "$id", "examples"):
                    continue
                if key == "description" and isinstance(value, str):
                    out[key] = value[:MAX_PROPERTY_DESCRIPTION]
                    continue
                out[key] = strip(value, depth + 1)
            return out
        if isinstance(node, list):
            return [strip(v, depth + 1) for v in node]
        return node

    result = strip(schema or {}, 0)
    if not isinstance(result, dict) or result.get("type") != "object":
        result = {"type": "object", "properties": {}}
    result.setdefault("properties", {})
    result.pop("additionalProperties", None)
    return result


def _params_model(schema: dict[str, Any]) -> type[BaseModel]:
    class McpParams(BaseModel):
        model_config = ConfigDict(extra="allow")

        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
            return schema

    return McpParams


class McpTool:
    """One remote tool; ``run`` forwards to the manager, which owns the connection."""

    owner_only = False  # the registry's guestTools list is the gate (owner-only by default)
    brings_outside_text = True  # a server's answers are its own (or the world's) words

    def __init__(self, manager: ToolCaller, server: str, remote_name: str,
                 description: str | None, input_schema: dict[str, Any] | None, *,
                 read_only: bool = False) -> None:
        self._manager = manager
        # Only the owner's config marks a tool read-only (a server's own hint is its word, not ours).
        self.owner_power = not read_only
        self.server = server
        self.remote_name = remote_name
        self.name = tool_name(server, remote_name)
        text = (description or f"{remote_name} (MCP server {server})").strip()
        self.description = text[:MAX_DESCRIPTION]
        self.schema = compact_schema(input_schema)
        self.Params = _params_model(self.schema)

    async def run(self, ctx: TurnContext, params: Any) -> str:
        arguments = dict(params.model_extra or {}) if isinstance(params, BaseModel) else dict(params)
        return await self._manager.call(self.server, self.remote_name, arguments)


def render_result(result: Any) -> str:
    """A CallToolResult as text for the model; an ``isError`` result raises ToolError."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            parts.append(str(getattr(resource, "text", None) or f"[resource {getattr(resource, 'uri', '')}]"))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')} omitted]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(block, 'uri', '')}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts) if parts else "(no output)"
    if getattr(result, "is_error", False):
        raise ToolError(text)
    return text
