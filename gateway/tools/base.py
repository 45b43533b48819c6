"""The tool contract and the registry that runs tools for the model.

A tool is a name, a description, a pydantic ``Params`` model (its JSON schema is what
the model sees) and ``async run(ctx, params) -> str``. The registry validates arguments,
enforces the role policy and turns every failure into an ``Error: ...`` string for the
model (``error_result``: the traceback goes to the log), so direct callers (the scheduler,
the local API) get the same answers as the model. Truncating long results is the tool
loop's job (``gateway/agent/toolloop.py``), which also applies ``error_result`` to executors
outside this registry (Dream's tools).

Two optional members let the approvals policy (``gateway/approvals``) judge a call without
knowing the tool: ``brings_outside_text`` (a class attribute: its results are the outside
world's words, e.g. a web page) and ``owner_power`` (a bool, or ``owner_power(ctx, params)``
when it depends on the arguments: exec, a write to an owner-only path, a message to another
chat). A tool whose result is outside text only sometimes returns ``OutsideText``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from lucidgate.config.schema import AgentDefaults
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.gitpaths import as_text

logger = logging.getLogger(__name__)


class ToolParams(BaseModel):
    """Base for tool parameter models: unknown arguments are an error the model can read."""

    model_config = ConfigDict(extra="forbid")


class Tool(Protocol):
    """Read-only members, so plain class attributes (and a nested ``Params`` class) satisfy it."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def Params(self) -> type[BaseModel]: ...  # noqa: N802 — the model class is the tool's schema

    @property
    def owner_only(self) -> bool: ...

    async def run(self, ctx: TurnContext, params: Any) -> str: ...


class OutsideText(str):
    """A tool's answer that carries someone else's words (a guest's search hit, a file a guest
    may write): ``origin`` says whose, for the approval prompt."""

    origin: str = ""

    @classmethod
    def of(cls, text: str, origin: str) -> OutsideText:
        out = cls(text)
        out.origin = origin
        return out


class ToolOutput(str):
    """What ``ToolRegistry.execute`` returns: the text the model reads, plus ``failed`` — the
    typed verdict, so no caller has to guess from the text (a file may well begin "Error") —
    and ``outside``: where the text came from when it is not the owner's or the gateway's own
    (None for those)."""

    failed: bool = False
    outside: str | None = None

    @classmethod
    def error(cls, text: str) -> ToolOutput:
        out = cls(text if text.startswith("Error:") else f"Error: {text}")
        out.failed = True
        return out


def failed(output: str) -> bool:
    """True for an error result from the registry (a plain ``str`` is a tool's own answer)."""
    return isinstance(output, ToolOutput) and output.failed


def error_result(name: str, exc: Exception) -> str:
    """The one wording of an unexpected tool failure; logs the traceback for the operator."""
    logger.exception("tool %s failed", name)
    return f"Error: {name} failed: {type(exc).__name__}: {exc}"


def _compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema as the model needs it, every request: no pydantic titles, and an
    optional field (``X | None = None``) shown as plain ``X``, and no defaults — leaving a
    field out is how the model asks for its default or "none" (the arguments are still
    validated by the pydantic model, which fills defaults and accepts null too). Fewer
    prompt characters, same meaning."""
    schema = model.model_json_schema()

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: v for k, v in node.items() if k != "title"}
            options = node.get("anyOf")
            if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
                node.pop("anyOf")
                node = {**next(o for o in options if o != {"type": "null"}), **node}
            if "type" in node or "enum" in node:  # a field's schema (not the properties map)
                node.pop("default", None)  # the model leaves a field out to get its default
            return {k: strip(v) for k, v in node.items()}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    schema = strip(schema)
    schema.pop("additionalProperties", None)
    return schema


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = (), *, max_result_chars: int = AgentDefaults.default_of("max_tool_result_chars"),
                 guest_tools: Iterable[str] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.max_result_chars = max_result_chars  # applied by the tool loop
        self._guest_tools = frozenset(guest_tools)
        self._schema_cache: dict[str, dict[str, Any]] = {}
        self.generation = 0  # bumped on every change, so sizes cached per tool set go stale
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool
        self._schema_cache.clear()
        self.generation += 1

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self._schema_cache.clear()
            self.generation += 1

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def allowed(self, tool: Tool, ctx: TurnContext) -> bool:
        if ctx.is_owner:
            return True
        return not tool.owner_only and tool.name in self._guest_tools

    def schemas(self, ctx: TurnContext) -> list[dict[str, Any]]:
        """OpenAI-style tool schemas for the tools this turn's role may use (stable order)."""
        out = []
        for tool in self._tools.values():
            if not self.allowed(tool, ctx):
                continue
            schema = self._schema_cache.get(tool.name)
            if schema is None:
                schema = {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": _compact_schema(tool.Params),
                    },
                }
                self._schema_cache[tool.name] = schema
            out.append(schema)
        return out

    def prepare(self, ctx: TurnContext, name: str, raw_arguments: str | dict | None) -> tuple[Tool, Any] | ToolOutput:
        """The tool and its validated parameters, or the error the model reads."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutput.error(f"there is no tool named {name!r}. Available: {', '.join(self._tools)}")
        if not self.allowed(tool, ctx):
            return ToolOutput.error(f"the tool {name!r} is not available to you in this chat.")
        try:
            arguments = _parse_arguments(raw_arguments)
            params = tool.Params.model_validate(arguments)
        except (ValueError, ValidationError) as exc:
            return ToolOutput.error(f"invalid arguments for {name}: {_short_validation(exc)}")
        return tool, params

    async def execute(self, ctx: TurnContext, name: str, raw_arguments: str | dict | None) -> ToolOutput:
        """Run one tool call; never raises (except cancellation). ``failed`` says how it went."""
        prepared = self.prepare(ctx, name, raw_arguments)
        if isinstance(prepared, ToolOutput):
            return prepared
        tool, params = prepared
        try:
            result = await tool.run(ctx, params)
        except ToolError as exc:
            return ToolOutput.error(as_text(str(exc)))
        except Exception as exc:  # noqa: BLE001 - the model reads it; the log keeps the trace
            return ToolOutput.error(error_result(name, exc))
        # A listing may name a file whose name is not UTF-8: the transcript must hold it.
        output = ToolOutput(as_text(result))
        if isinstance(result, OutsideText):
            output.outside = result.origin or f"the result of {name}"
        elif getattr(tool, "brings_outside_text", False):
            output.outside = f"the result of {name}"
        return output


def _parse_arguments(raw: str | dict | None) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value


def _short_validation(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
            parts.append(f"{loc}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)
