"""The ``message`` tool: send a text, and optionally workspace files, to a chat on any
running channel (owner only).

Files are named by workspace path and checked here exactly as ``read_file`` checks a path
(resolved, confined to the workspace, never internal state; a guest's turn also held to the
owner-only table), then capped in size, so a bad path is the model's error now rather than a
failed delivery later. The channel checks once more when it sends (``channels.outfiles``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from lucidgate.channels.bus import MessageBus
from lucidgate.channels.messages import OutboundText, Target
from lucidgate.channels.outfiles import MAX_FILE_BYTES, MAX_FILES
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools import _paths
from lucidgate.gateway.tools.base import ToolParams
from lucidgate.gateway.tools.turn import TurnContext


class MessageParams(ToolParams):
    text: str = Field(min_length=1, max_length=20_000)
    files: list[str] = Field([], max_length=MAX_FILES,
                             description=f"workspace paths, <= {MAX_FILE_BYTES // 2**20} MB each")
    channel: str | None = Field(None, description="e.g. telegram")
    chat_id: str | None = None
    thread_id: str | None = None


class MessageTool:
    name: ClassVar[str] = "message"
    description: ClassVar[str] = (
        "Send text and files to this chat or to another chat on any channel."
    )
    Params: ClassVar[type[MessageParams]] = MessageParams
    owner_only: ClassVar[bool] = True

    def __init__(self, bus: MessageBus, *, agent: str = "") -> None:
        self.bus = bus
        # The agent whose turns use this tool ("" the default one): its messages carry it, so
        # the channels look for their files in its workspace (``channels.outfiles.FileRoots``).
        self.agent = agent

    def owner_power(self, ctx: TurnContext, params: MessageParams) -> bool:
        """Another chat, or files from the workspace: more than answering here."""
        other = (params.channel or ctx.channel, params.chat_id or ctx.chat_id) != (ctx.channel, ctx.chat_id)
        return other or bool(params.files)

    async def run(self, ctx: TurnContext, params: MessageParams) -> str:
        channel = params.channel or ctx.channel
        chat_id = params.chat_id or ctx.chat_id
        thread_id = params.thread_id if (params.channel or params.chat_id) else (params.thread_id or ctx.thread_id)
        if not self.bus.has_route(channel):
            raise ToolError(f"channel {channel!r} is not running; enabled channels receive messages")
        files = await asyncio.to_thread(_checked_files, ctx, params.files)
        await self.bus.publish_outbound(OutboundText(Target(channel, chat_id, thread_id), params.text,
                                                     files=files, agent=self.agent))
        sent = f"sent to {channel}:{chat_id}" + (f" (thread {thread_id})" if thread_id else "")
        return sent + (f" with {len(files)} file(s)" if files else "")


def _checked_files(ctx: TurnContext, raw: list[str]) -> tuple[str, ...]:
    """Each path resolved like ``read_file``'s and size-checked; workspace-relative, deduplicated."""
    root = ctx.workspace.resolve()
    out: list[str] = []
    for name in raw:
        path = _paths.resolve(ctx.workspace, name, restrict=True, access="read",
                              guest=None if ctx.is_owner else ctx.session_key)
        shown = _paths.display(root, path)
        _paths.require_file(path, shown)
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ToolError(f"{shown} is {size / 1e6:.1f} MB; files up to {MAX_FILE_BYTES // 2**20} MB can be "
                            "sent (compress or split it first)")
        rel = Path(shown).as_posix()
        if rel not in out:
            out.append(rel)
    return tuple(out)
