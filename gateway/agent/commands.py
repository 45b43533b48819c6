"""Slash commands (DESIGN §7): handled without an agent turn.

Every command answers to its ``_`` spelling too (``/dream_log``), since Telegram's menu
allows only ``[a-z0-9_]``. Commands that reveal or change the owner's memory are
owner-only and private-only. Commands that change the conversation itself (``/new``,
``/compact``) are the owner's in a shared chat (group, channel, thread): a guest there would
otherwise reset or summarise everyone's conversation, the owner's included. Handlers get the frozen ``TurnContext`` and return the reply.

A built-in command is a small unit (gateway/commands/): an object holding only the parts it
reads, with its listing in ``about`` and ``async __call__(ctx, args) -> str``; the composition
root builds each one and ``register``s it, the way a listener is registered.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from lucidgate.channels.base import CommandSpec
from lucidgate.gateway.tools.turn import TurnContext

Handler = Callable[[TurnContext, str], Awaitable[str]]

_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_\-]*)(?:@\S+)?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    # None: listed here (help, menus) but handled by the agent loop before the session's
    # queue, since it must reach a turn that is already running (``/stop``).
    handler: Handler | None
    owner_only: bool = False
    private_only: bool = False
    usage: str = ""
    owner_when_shared: bool = False


@dataclass(frozen=True, slots=True)
class About:
    """How a command is listed (``/help``, platform menus) and who may use it."""

    name: str
    summary: str
    owner_only: bool = False
    private_only: bool = False
    usage: str = ""
    owner_when_shared: bool = False  # in a shared chat, only the owner may use it


class CommandUnit(Protocol):
    """One built-in command: its listing, and the handler itself."""

    about: ClassVar[About]

    async def __call__(self, ctx: TurnContext, args: str) -> str: ...


def parse_command(text: str) -> tuple[str, str] | None:
    """``"/dream_log abc"`` -> ``("dream-log", "abc")``; None when ``text`` is not a command."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    return match.group(1).lower().replace("_", "-"), (match.group(2) or "").strip()


class CommandRegistry:
    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def add(self, command: Command) -> None:
        self._commands[command.name] = command

    def register(self, unit: CommandUnit) -> None:
        """Add a command unit under its ``about``."""
        a = unit.about
        self.add(Command(a.name, a.summary, unit, owner_only=a.owner_only, private_only=a.private_only,
                         usage=a.usage, owner_when_shared=a.owner_when_shared))

    def listed(self, about: About) -> None:
        """List a command that the agent loop handles itself, ahead of the queue (``/stop``)."""
        self.add(Command(about.name, about.summary, None, owner_only=about.owner_only,
                         private_only=about.private_only, usage=about.usage))

    def names(self) -> list[str]:
        return list(self._commands)

    def specs(self) -> list[CommandSpec]:
        """What channels need to advertise the commands (menus), in registration order."""
        return [CommandSpec(c.name, c.summary, c.owner_only) for c in self._commands.values()]

    def get(self, name: str) -> Command | None:
        return self._commands.get(name)

    def help_text(self, ctx: TurnContext) -> str:
        lines = ["Commands:"]
        for cmd in self._commands.values():
            if cmd.owner_only and not ctx.is_owner:
                continue
            usage = f" {cmd.usage}" if cmd.usage else ""
            lines.append(f"/{cmd.name}{usage} — {cmd.summary}")
        lines.append("Anything else is a message to the assistant.")
        return "\n".join(lines)

    async def dispatch(self, ctx: TurnContext, name: str, args: str) -> str:
        cmd = self._commands.get(name)
        if cmd is None:
            close = [n for n in self._commands if n.startswith(name[:3])]
            hint = f" Did you mean /{close[0]}?" if close else ""
            return f"Unknown command /{name}.{hint} Send /help for the list."
        if cmd.owner_only and not ctx.is_owner:
            return f"/{name} is only for the owner of this assistant."
        if cmd.private_only and ctx.chat_type != "private":
            return f"/{name} works only in a private chat with the assistant."
        if cmd.owner_when_shared and ctx.chat_type != "private" and not ctx.is_owner:
            return f"/{name} changes this shared conversation for everyone, so only the owner may use it here."
        if cmd.handler is None:
            raise RuntimeError(f"/{name} is handled by the agent loop and never dispatched")
        return await cmd.handler(ctx, args)
