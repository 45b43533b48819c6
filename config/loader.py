"""Load the configuration: file, then environment overrides, then validation.

Precedence of the file: ``--config`` > ``LUCIDGATE_CONFIG`` > ``~/.lucidgate/config.json``.
A missing file means defaults (the gateway still starts and explains how to add a key).
Environment: ``LUCIDGATE_`` + the key path in snake_case joined by ``__``, matched
case-insensitively (``LUCIDGATE_AGENTS__DEFAULTS__CONTEXT_WINDOW_TOKENS=32000``);
values are parsed as JSON when they are JSON (lists, numbers, booleans), else kept as text.
A variable naming no setting is an error against that variable, with the closest names.

systemd credentials: with ``LoadCredential=LUCIDGATE_PROVIDERS__OPENAI__API_KEY:/path``
the secret arrives as a file in ``$CREDENTIALS_DIRECTORY``; each file there named like
an override is applied as one (after the environment, so it wins).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from lucidgate.config.errors import ConfigError
from lucidgate.config.paths import DEFAULT_CONFIG_PATH, ENV_PREFIX, resolve_config_path
from lucidgate.config.schema import Config

_NOT_KEYS = {"LUCIDGATE_CONFIG"}

__all__ = ["DEFAULT_CONFIG_PATH", "ENV_PREFIX", "load_config", "resolve_config_path"]


def load_config(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Return a valid ``Config`` or raise ``ConfigError`` naming the key and the problem."""
    config_path = resolve_config_path(path)
    raw = _read_file(config_path)
    env = os.environ if environ is None else environ
    origins: dict[tuple[str, ...], str] = {}
    _apply_env(raw, {**env, **_credentials(env)}, origins)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, config_path, origins)) from None
    config._source_path = config_path.absolute()
    return config


def _credentials(env: Mapping[str, str]) -> dict[str, str]:
    """Overrides delivered as systemd credentials (files named like the variable)."""
    folder = env.get("CREDENTIALS_DIRECTORY")
    if not folder:
        return {}
    found: dict[str, str] = {}
    try:
        entries = sorted(Path(folder).iterdir())
    except OSError as exc:
        raise ConfigError(f"$CREDENTIALS_DIRECTORY ({folder}): cannot read ({exc.strerror})") from None
    for entry in entries:
        if entry.name.upper().startswith(ENV_PREFIX) and entry.is_file():
            try:
                found[entry.name] = entry.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"credential {entry}: cannot read ({exc.strerror})") from None
    return found


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: {_json_error(text, exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object")
    return data


def _json_error(text: str, exc: json.JSONDecodeError) -> str:
    """Where the JSON breaks, in words a person can act on, with the line and a caret.

    json's own message for the commonest slip, a trailing comma, points at the closing
    brace and says "Expecting property name"; this names the comma and the key before it."""
    pos, why = exc.pos, exc.msg
    before = text[:pos].rstrip()
    if pos < len(text) and text[pos] in "}]" and before.endswith(","):
        pos = len(before) - 1
        key = re.findall(r'"((?:[^"\\]|\\.)*)"\s*:', text[:pos])
        after = f' after "{key[-1]}"' if key else ""
        why = f"a trailing comma{after} before '{text[len(before):].lstrip()[:1]}' (JSON allows none: remove it)"
    line_no = text.count("\n", 0, pos) + 1
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:end if end >= 0 else len(text)]
    col = pos - start + 1
    gutter = f"{line_no} | "
    return (f"not valid JSON at line {line_no}, column {col}: {why}\n  {gutter}{line}\n"
            f"  {' ' * (len(gutter) - 2)}| {' ' * (col - 1)}^")


def _normalise(name: str) -> str:
    return re.sub(r"[_\-]", "", name).lower()


def _apply_env(raw: dict[str, Any], environ: Mapping[str, str],
               origins: dict[tuple[str, ...], str] | None = None) -> None:
    for var, value in sorted(environ.items()):
        upper = var.upper()
        if not upper.startswith(ENV_PREFIX) or upper in _NOT_KEYS:
            continue
        parts = [p for p in var[len(ENV_PREFIX) :].split("__") if p]
        if parts:
            _check_names(var, parts)
            path = _set_path(raw, Config, parts, value)
            if origins is not None:
                origins[path] = var


def _check_names(var: str, parts: list[str]) -> None:
    """An override must name a setting: a typo is reported against the variable."""
    model: type[BaseModel] | None = Config
    for depth, part in enumerate(parts):
        if model is None or model.model_config.get("extra") == "allow":
            return  # free-form below here (provider names, headers)
        names = {_normalise(n): n for n in model.model_fields}
        wanted = _normalise(part)
        if wanted not in names:
            prefix = ENV_PREFIX + "__".join(p.upper() for p in parts[:depth])
            prefix += "__" if depth else ""
            options = [prefix + n.upper() for n in model.model_fields]
            close = difflib.get_close_matches(prefix + part.upper(), options, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; known here: {', '.join(options)}"
            raise ConfigError(f"environment variable {var}: {part!r} is not a setting{hint}")
        model = _submodel(model, names[wanted])


def _decode_env_value(value: str, model: type[BaseModel] | None, key: str) -> Any:
    """JSON only where the field holds a list, a mapping or a whole section.

    Everything else stays the text it was: pydantic turns "32000" into an int and "true"
    into a bool where the field wants one, and a secret of digits stays a string.
    """
    if not _wants_json(model, key):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _wants_json(model: type[BaseModel] | None, key: str) -> bool:
    if model is None:
        return False
    wanted = _normalise(key)
    for name, field in model.model_fields.items():
        if _normalise(name) != wanted and _normalise(field.alias or "") != wanted:
            continue
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            origin = getattr(candidate, "__origin__", candidate)
            if origin in (list, dict, set, tuple, frozenset):
                return True
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                return True
    return False


def _set_path(raw: dict[str, Any], model: type[BaseModel] | None, parts: list[str],
              value: str) -> tuple[str, ...]:
    """Set ``value`` at ``parts`` in ``raw``, mapping each part to the canonical key name;
    returns the normalised path (to name the variable in a validation error)."""
    key, rest = parts[0], parts[1:]
    canonical, sub_model = _match_field(model, key, raw)
    if not rest:
        raw[canonical] = _decode_env_value(value, model, key)
        return (_normalise(canonical),)
    child = raw.get(canonical)
    if not isinstance(child, dict):
        child = {}
        raw[canonical] = child
    return (_normalise(canonical), *_set_path(child, sub_model, rest, value))


def _match_field(
    model: type[BaseModel] | None, key: str, raw: dict[str, Any]
) -> tuple[str, type[BaseModel] | None]:
    wanted = _normalise(key)
    for existing in raw:
        if _normalise(existing) == wanted:
            return existing, _submodel(model, existing)
    if model is not None:
        for name, field in model.model_fields.items():
            if _normalise(name) == wanted:
                return field.alias or name, _submodel(model, name)
    return key.lower(), None


def _submodel(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    if model is None:
        return None
    wanted = _normalise(key)
    for name, field in model.model_fields.items():
        if _normalise(name) == wanted:
            annotation = field.annotation
            for candidate in (annotation, *getattr(annotation, "__args__", ())):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    return candidate
    return None


def _describe(exc: ValidationError, path: Path, origins: dict[tuple[str, ...], str] | None = None) -> str:
    origins = origins or {}
    errors = exc.errors()
    from_env = [origins.get(tuple(_normalise(str(p)) for p in err["loc"])) for err in errors]
    where = str(path) if not all(from_env) else "environment"
    lines = [f"{where}: invalid configuration"]
    for err, var in zip(errors, from_env):
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        if var:
            loc = f"{var} ({loc})"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _did_you_mean(err["loc"])
        got = err.get("input")
        shown = "" if err["type"] == "extra_forbidden" or isinstance(got, dict) else f" (got {got!r})"
        if any(s in loc.lower() for s in ("token", "key", "secret")):
            shown = ""
        lines.append(f"  {loc}: {msg}{shown}")
    return "\n".join(lines)


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """" (did you mean 'port'?)" for a misspelt key, by the keys allowed at that place."""
    model: type[BaseModel] | None = Config
    for part in loc[:-1]:
        model = _submodel(model, str(part))
        if model is None:
            break
    if model is None:
        return " (check the spelling; see docs/configuration.md)"
    known = [f.alias or n for n, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known keys here: {', '.join(known)})"
