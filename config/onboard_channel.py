"""``lucid onboard --channel NAME``: which settings a channel asks for, and writing them.

One table (``PROMPTS``) says, per channel, the settings its preflight cannot do without plus
the owners, in the order a person finds them on the platform; adding a channel is one line.
Answers arrive as text (a prompt, ``--set key=value``) and become the section's JSON types
here, checked against the section's schema before the file is touched, so a typo loses
nothing. The file is edited in place: every other key stays, the result is written atomically
and stays 0600. The channel's own preflight lives in its package (a higher layer), so running
it is the command's job.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError

from lucidgate.config.onboard import channel_document, read_config_document, write_config_document
from lucidgate.config.schema import ChannelsConfig

__all__ = ["PROMPTS", "Prompt", "current_text", "is_secret", "parse_answer", "section_keys", "write_channel"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """One question: the section's camelCase ``key`` and what to tell the person about it."""

    key: str
    hint: str = ""


_OWNERS = "owners"
PROMPTS: dict[str, tuple[Prompt, ...]] = {
    "email": (Prompt("address", "the assistant's own mailbox, e.g. assistant@example.org"),
              Prompt("imapHost", "e.g. imap.example.org"), Prompt("imapPort"), Prompt("imapSecurity", "ssl or plain"),
              Prompt("smtpHost", "e.g. smtp.example.org"), Prompt("smtpPort"),
              Prompt("smtpSecurity", "starttls, ssl or plain"),
              Prompt("password", "an app password where the provider has them"),
              Prompt("authservId", "your receiving server's Authentication-Results name, e.g. mx.google.com"),
              Prompt(_OWNERS, "your addresses, comma-separated")),
    "dingtalk": (Prompt("clientId", "the app's Client ID (AppKey)"),
                 Prompt("clientSecret", "the app's Client Secret (AppSecret)"),
                 Prompt(_OWNERS, "your staff ids, comma-separated")),
    "telegram": (Prompt("token", "from @BotFather"), Prompt(_OWNERS, "your numeric user ids, comma-separated")),
    "slack": (Prompt("botToken", "xoxb-…"), Prompt("appToken", "xapp-…, for socket mode"),
              Prompt(_OWNERS, "your member ids (U…), comma-separated")),
    "discord": (Prompt("token", "the bot's token"), Prompt(_OWNERS, "your user ids, comma-separated")),
    "matrix": (Prompt("homeserver", "e.g. https://matrix.example.org"), Prompt("userId", "e.g. @lucid:example.org"),
               Prompt("accessToken", "or leave empty and give a password"), Prompt("password"),
               Prompt(_OWNERS, "your Matrix ids (@you:example.org), comma-separated")),
}


def _model(channel: str) -> type[BaseModel]:
    model = ChannelsConfig.model_fields[channel].annotation
    assert isinstance(model, type) and issubclass(model, BaseModel)
    return model


def _fields(channel: str) -> dict[str, tuple[str, Any]]:
    """camelCase key -> (attribute name, annotation) of the settings text can set: nested
    sections (``telegram.webhook``) are left to the config file."""
    found: dict[str, tuple[str, Any]] = {}
    for name, info in _model(channel).model_fields.items():
        if not any(isinstance(t, type) and issubclass(t, BaseModel) for t in _members(info.annotation)):
            found[info.alias or name] = (name, info.annotation)
    return found


def _members(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def section_keys(channel: str) -> list[str]:
    """Every key ``--set`` accepts for ``channel``, sorted (for the error that lists them)."""
    return sorted(_fields(channel))


def is_secret(channel: str, key: str) -> bool:
    return SecretStr in _members(_fields(channel)[key][1])


def _is_list(channel: str, key: str) -> bool:
    return any(typing.get_origin(t) is list for t in _members(_fields(channel)[key][1]))


def current_text(section: BaseModel, channel: str, key: str) -> str:
    """The value of ``key`` in a loaded section as a prompt shows it (a list comma-separated;
    a secret's text is for comparison only and never shown)."""
    value = getattr(section, _fields(channel)[key][0])
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def parse_answer(channel: str, key: str, text: str) -> Any:
    """``text`` as the JSON value of ``channels.<channel>.<key>``; ``ValueError`` naming the key
    and the problem when the schema refuses it (an unknown key lists the valid ones)."""
    fields = _fields(channel)
    if key not in fields:
        raise ValueError(f"channels.{channel} has no key {key!r}; valid keys: {', '.join(section_keys(channel))}")
    name, annotation = fields[key]
    text = text.strip()
    value: Any
    if _is_list(channel, key):
        value = [part.strip() for part in text.split(",") if part.strip()]
    elif str in _members(annotation) or SecretStr in _members(annotation):
        value = None if text == "null" and type(None) in _members(annotation) else text
    else:
        try:
            value = json.loads(text)  # numbers, true/false, null
        except ValueError:
            value = text  # the schema check below says what it should be
    try:
        _model(channel).model_validate({key: value})
    except ValidationError as exc:
        problem = exc.errors()[0]["msg"]
        raise ValueError(f"channels.{channel}.{key}: {problem}") from None
    return value


def write_channel(path: Path, channel: str, values: dict[str, Any]) -> None:
    """Put ``values`` (already parsed) into ``channels.<channel>`` of the config at ``path``
    and switch the channel on; every other key of the file is kept. ``ValueError`` when the
    file is not a JSON object or the section would not validate (nothing is written then)."""
    data = read_config_document(path)
    section = channel_document(data, channel, path)
    section.update(values)
    section["enabled"] = True
    try:
        _model(channel).model_validate(section)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{path}: channels.{channel}.{where}: {first['msg']}") from None
    write_config_document(path, data)
